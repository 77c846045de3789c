"""The host side of rigkit: what runs on the rig itself (DESIGN.md "The host side"; notes/one-piece.md
"Where code runs").

Installed in ``/opt/rigkit/venv`` from the agent's wheel, which holds this package with what it shares
with the control side, :mod:`rigkit.common` (standard library only) and :mod:`rigkit.bench` (the
bench), plus ``rigkit/__init__.py``; its environment adds requests, PyYAML, huggingface-hub,
nvidia-ml-py and prometheus-client, never the control side's pydantic, pyinfra, rich or click, and no module of the
control side imports this package (``tests/unit/test_layout.py`` fails otherwise). Every host command
reads the one rendered host config (:mod:`rigkit.host.config`, ``/etc/rigkit/host.json``) and takes
the one host lock (:mod:`rigkit.host.lock`) before it changes the serving state.
"""
