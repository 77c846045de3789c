"""The host side of rigkit: what runs on the rig itself (DESIGN.md "The host side").

Installed in ``/opt/rigkit/venv`` from a wheelhouse that holds only this package (and
``rigkit/__init__.py``) plus requests, PyYAML, huggingface-hub, nvidia-ml-py and prometheus-client
(:data:`rigkit.deploy.wheelhouse.AGENT_REQUIREMENTS`): the standard library and those five, never the
control side's pydantic, pyinfra, rich or click, and no module of the control side
(``tests/unit/test_host_side.py`` fails otherwise). Every host command reads the one
rendered host config (:mod:`rigkit.host.config`, ``/etc/rigkit/host.json``) and takes the one host
lock (:mod:`rigkit.host.lock`) before it changes the serving state.
"""
