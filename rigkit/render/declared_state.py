"""Declared host state that the deploy enforces and drift compares: one definition for both.

Sources: ``notes/nvidia-arch.md`` §1.4 (what ``nvidia-ctk runtime configure --runtime=docker``
writes) and §5 (the cgroup mitigation), §2.2 (reboot pending); ``notes/hyperqwen.md``
(``prepare`` rewrites the base model in place).
"""

from __future__ import annotations

#: What rigkit owns in ``/etc/docker/daemon.json``: the nvidia runtime exactly as ``nvidia-ctk
#: runtime configure --runtime=docker`` writes it, and NVIDIA's documented mitigation for
#: containers losing the GPU on ``systemctl daemon-reload``. Other keys are the operator's.
DAEMON_JSON_KEYS = {
    "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    "exec-opts": ["native.cgroupdriver=cgroupfs"],
}

#: Models rewritten in place by HyperQwen's ``prepare``: after it, their record (not the lock) is
#: the reference.
PREPARED_MODELS = frozenset({"hyperqwen"})
#: What the rig installs from the repos with ``pacman -Syu --needed`` (pinned packages come from the
#: archive): docker, Compose v2, buildx and the NVIDIA container toolkit (Arch's package names).
REPO_PACKAGES = ("docker", "docker-compose", "docker-buildx", "nvidia-container-toolkit")


def reboot_reasons(kernel: dict, dkms: list[dict], driver_version: str, flavour: str) -> list[str]:
    """Why the GPU steps cannot run on the running boot (empty: they can).

    + kernel: the ``KernelState`` fact (running release, loaded nvidia module, installed kernels)
    + dkms: the ``DkmsStatus`` fact
    + driver_version: ``nvidia_driver_version``; flavour: ``driver_flavour``

    The running kernel must still be installed (its ``/usr/lib/modules`` entry), and the loaded
    ``nvidia`` module must be the pinned driver; with a DKMS flavour the module must also be built
    for every installed kernel (so whichever boots has it).
    """
    reasons = []
    kernels = sorted(kernel.get("installed_kernels", []))
    running = kernel.get("running", "")
    if kernels and running not in kernels:
        reasons.append(f"running kernel {running} is no longer installed (installed: {', '.join(kernels)})")
    loaded = kernel.get("nvidia_module")
    if loaded != driver_version:
        reasons.append(f"loaded nvidia module is {loaded or 'none'}, the pinned driver is {driver_version}")
    if flavour.endswith("-dkms") and kernels:
        built = {d["kernel"] for d in dkms if d["module"] == "nvidia" and d["version"] == driver_version
                 and d["status"].startswith("installed")}
        missing = [k for k in kernels if k not in built]
        if missing:
            reasons.append(f"DKMS has not built nvidia {driver_version} for {', '.join(missing)}")
    return reasons
