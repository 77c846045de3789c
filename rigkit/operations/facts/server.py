"""Facts of the host itself: the running kernel, what boots next, the loaded NVIDIA module, the
host's Python (as pyinfra's own ``pyinfra/facts/server.py`` holds the kernel's)."""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase


#: The host's Python as the agent's wheelhouse is built for it (``"3.13"``): the deploy's ``Command``
#: fact (roles/agent.py) and drift's probe. ``python3 -V`` prints ``Python 3.13.1`` (CPython's
#: ``--version``, on stdout since 3.4) without starting the interpreter (1 ms, not 7); the shell keeps
#: the major and minor parts. No ``python3``: empty, as before.
PYTHON_VERSION_COMMAND = 'v=$(python3 -V 2>/dev/null) && v=${v#Python } && echo "${v%.*}"'


class KernelState(FactBase):
    """The running kernel and what will boot next.

    Command: ``uname -r``, ``cat /proc/sys/kernel/random/boot_id``, ``cat
    /sys/module/nvidia/version`` (the loaded module; empty when not loaded) and the installed
    kernels: each ``/usr/lib/modules/<version>/`` holding its image ``vmlinuz`` (Arch's kernel
    packages install it there; a folder left behind by a removed kernel, or by DKMS, holds none and
    is no kernel). Returns ``{"running": str, "boot_id": str, "nvidia_module": str | None,
    "installed_kernels": [str]}``.

    Seam (documented, sandbox only): when ``/etc/rigkit/fact-seams.sh`` exists it may set
    ``RIGKIT_KERNEL_RELEASE_FILE`` (read instead of ``uname -r``) and
    ``RIGKIT_NVIDIA_MODULE_VERSION_FILE`` (read instead of ``/sys/module/nvidia/version``): a
    container cannot have a kernel or a module of its own. A real rig has no such file.
    """

    SEAMS = "/etc/rigkit/fact-seams.sh"

    def command(self) -> str:
        return (f"[ -r {self.SEAMS} ] && . {self.SEAMS}; "
                "if [ -n \"$RIGKIT_KERNEL_RELEASE_FILE\" ]; then echo running=$(cat \"$RIGKIT_KERNEL_RELEASE_FILE\"); "
                "else echo running=$(uname -r); fi; "
                "echo boot_id=$(cat /proc/sys/kernel/random/boot_id); "
                "echo nvidia=$(cat \"${RIGKIT_NVIDIA_MODULE_VERSION_FILE:-/sys/module/nvidia/version}\" 2>/dev/null); "
                "for d in /usr/lib/modules/*/; do [ -f \"${d}vmlinuz\" ] && echo kernel=$(basename \"$d\"); done; true")

    def process(self, output: list[str]) -> dict[str, Any]:
        state: dict[str, Any] = {"running": "", "boot_id": "", "nvidia_module": None, "installed_kernels": []}
        for line in output:
            key, _, value = line.partition("=")
            value = value.strip()
            if key == "running":
                state["running"] = value
            elif key == "boot_id":
                state["boot_id"] = value
            elif key == "nvidia":
                state["nvidia_module"] = value or None
            elif key == "kernel" and value:
                state["installed_kernels"].append(value)
        return state
