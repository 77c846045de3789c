"""The operator's rig: one Arch Linux box with an RTX 3090, reached over SSH with sudo.

pyinfra inventory (``pyinfra inventory/rig.py deploy.py``); every host here is also in the
group ``rig`` (the file name). Connection keys are pyinfra's own; the rig's declared state
lives in ``group_data/`` — override single keys per host here only when a host differs.
"""

gpu_rigs = [
    (
        "rig",
        {
            "ssh_hostname": "rig.lan",
            "_sudo": True,
            # written by `rigkit lock -i inventory/rig.py`; the deploy fetches and installs only what it names
            "lockfile": "inventory/rig.lock.json",
        },
    ),
]
