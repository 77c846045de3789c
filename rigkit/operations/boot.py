"""Boot: the ``kms`` hook out of mkinitcpio (through rigkit's drop-in), a reboot confirmed by a
new boot id, and the reboot gate that stops the GPU steps (or reboots) while the running kernel or
the loaded module is not what was installed."""

from __future__ import annotations

import hashlib
import time
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, StringCommand, operation
from pyinfra.operations import files

from rigkit import paths
from rigkit.agentcmd import locked_command
from rigkit.operations.config import _backup
from rigkit.operations.facts.dkms import DkmsStatus
from rigkit.operations.facts.mkinitcpio import MkinitcpioHooks
from rigkit.operations.facts.rig import RigBusy
from rigkit.operations.facts.server import KernelState
from rigkit.common import mkinitcpio
from rigkit.common import busy as rig_busy
from rigkit.render.declared_state import reboot_reasons
from rigkit.operations.shell import script


@operation()
def mkinitcpio_without_kms():
    """Keep the ``kms`` hook out of the initramfs through rigkit's drop-in
    (:data:`rigkit.paths.MKINITCPIO_DROPIN`, :data:`rigkit.common.mkinitcpio.DROPIN_TEXT`), never by
    editing the operator's files; rebuild the initramfs (``mkinitcpio -P``) only when the effective
    HOOKS change.

    Reads the effective HOOKS with mkinitcpio's own loading (:class:`~rigkit.operations.facts.mkinitcpio.MkinitcpioHooks`,
    the fact drift reads too), now and with the drop-in as declared. No ``/etc/mkinitcpio.conf``:
    nothing to do. Raises ``OperationError`` (:func:`rigkit.common.mkinitcpio.refusal`) when a preset
    names its own config holding kms (no drop-in would be read for it; one without kms needs nothing)
    or kms would stay in effect; preflight refuses the
    same before anything is touched. When the drop-in changes the effective HOOKS it is installed and
    the initramfs rebuilt in one step; a failed rebuild puts the previous drop-in back (so the next
    deploy tries again) and fails. A drop-in edited by hand is backed up first, the backup named.

    **Example:**

    .. code:: python

        from rigkit.operations.boot import mkinitcpio_without_kms
        mkinitcpio_without_kms(name="Keep the kms hook out of mkinitcpio's HOOKS (rigkit's drop-in)")
    """
    from pyinfra.facts.files import Sha256File

    loaded = host.get_fact(MkinitcpioHooks)
    if not loaded["present"]:
        host.noop(f"{paths.MKINITCPIO_CONF} absent")
        return
    problem = mkinitcpio.refusal(loaded)
    if problem:
        raise OperationError(problem)
    path = paths.MKINITCPIO_DROPIN
    current = host.get_fact(Sha256File, path=path)
    wanted = hashlib.sha256(mkinitcpio.DROPIN_TEXT.encode()).hexdigest()
    rebuild = loaded["hooks"] != loaded["with_rigkit"]
    if current == wanted and not rebuild:
        host.noop(f"kms is not in mkinitcpio's HOOKS ({' '.join(loaded['hooks'])})")
        return
    if current and current != wanted and current not in mkinitcpio.EARLIER_DROPIN_SHA256:
        yield from _backup(path, "rigkit's drop-in was edited by hand")
    if not rebuild:
        yield from files.put._inner(src=StringIO(mkinitcpio.DROPIN_TEXT), dest=path, user="root", group="root",
                                    mode="644", create_remote_dir=True)
        return
    logger.info(f"{host.print_prefix}mkinitcpio HOOKS: {' '.join(loaded['hooks'])} -> "
                f"{' '.join(loaded['with_rigkit'])}; rebuilding the initramfs")
    staged = f"{path}.rigkit-new"  # not *.conf: mkinitcpio does not read it
    yield from files.put._inner(src=StringIO(mkinitcpio.DROPIN_TEXT), dest=staged, user="root", group="root",
                                mode="644", create_remote_dir=True)
    yield script("if [ -e {path} ]; then cp -a {path} {prev}; fi; mv -f {staged} {path}; "
                 "if mkinitcpio -P; then rm -f {prev}; "
                 "else rc=$?; if [ -e {prev} ]; then mv -f {prev} {path}; else rm -f {path}; fi; exit $rc; fi",
                 path=path, prev=f"{path}.rigkit-prev", staged=staged)


@operation(is_idempotent=False)
def reboot(reboot_timeout: int = 300, interval: float = 1.0):
    """Reboot and wait until the host answers with a **new boot id**.

    + reboot_timeout: seconds to wait for the host
    + interval: seconds between reconnect attempts

    pyinfra's ``server.reboot`` confirms by uptime, which a container shares with its host;
    ``/proc/sys/kernel/random/boot_id`` changes on every boot, real or container. Gate it with
    ``_if`` on the change that needs it: it always reboots.

    **Example:**

    .. code:: python

        from rigkit.operations.boot import reboot
        reboot(
            name="Reboot into the new kernel and driver",
            reboot_timeout=300,
            interval=1.0,
        )
    """
    before: list[str] = []

    def capture(state, host):  # noqa: F811 - pyinfra passes (state, host) by name
        before.append(host.get_fact(KernelState)["boot_id"])

    yield FunctionCommand(capture, (), {})
    # under the host lock: refused at once (naming the holder) while a window, an activation or a
    # rollback owns the rig; then the reboot itself, detached, still holding it until the host goes down
    what = "deploy: reboot for the new kernel/driver"
    yield StringCommand(locked_command(what, ["true"]))
    yield script("( sleep 1 && {reboot} ) </dev/null >/dev/null 2>&1 &",
                 reboot=StringCommand(locked_command(what, ["systemctl", "reboot"])))

    def wait(state, host):  # noqa: F811 - proven on the sandbox host
        time.sleep(3)
        host.disconnect()
        deadline = time.monotonic() + reboot_timeout
        while time.monotonic() < deadline:
            host.connect(show_errors=False)
            if host.connected:
                if host.get_fact(KernelState)["boot_id"] not in ("", before[0]):
                    return
                host.disconnect()
            time.sleep(interval)
        raise OperationError(f"host did not come back with a new boot id within {reboot_timeout} s")

    yield FunctionCommand(wait, (), {})


@operation()
def reboot_gate(driver_version: str, flavour: str, allow_reboot: bool, reboot_timeout: int = 300,
                lock_files: list[str] | None = None, proxy_port: int = 8080, force: bool = False,
                own_units: list[str] | None = None):
    """Stop the deploy before the GPU steps while a reboot is pending, or reboot when allowed.

    + driver_version: the pinned driver (:func:`rigkit.render.declared_state.pinned_driver`: the
      pin's full version, or ``nvidia_driver_version``; the module agrees by :func:`rigkit.common.versions.agrees`)
    + flavour: the driver package (``driver_flavour``)
    + allow_reboot: the spec's ``reboot`` switch (``--data reboot=true``)
    + lock_files/proxy_port/force: a reboot is refused while a declared lock file exists or the
      proxy has client connections (rigkit's own, from ``own_units``, left out), unless ``force``;
      and always while the host lock is held (the reboot runs under it)

    No command when nothing is pending, so a converged run reports no change. With a pending
    reboot and ``allow_reboot`` false the host fails with "reboot, then run again". A reboot
    happens only once DKMS has built the module for the kernel that will boot.

    **Example:**

    .. code:: python

        from rigkit.operations.boot import reboot_gate
        reboot_gate(
            name="Reboot gate: the running kernel and driver are the installed ones",
            driver_version="610.57",
            flavour="nvidia-open-dkms",
            allow_reboot=False,
            lock_files=[],
            proxy_port=8080,
            force=False,
            own_units=["hyperqwen-watchdog.service", "rigkit-activate.service", "rigkit-keeper.service",
                       "rigkit-lock.service", "rigkit-window.service"],
        )
    """
    if not host.state.is_executing:
        return  # facts before this run's installs say nothing about after them
    kernel = host.get_fact(KernelState)
    dkms = host.get_fact(DkmsStatus)
    reasons = reboot_reasons(kernel, dkms, driver_version, flavour)
    if not reasons:
        host.noop("running kernel and loaded driver are the installed ones")
        return
    unbuilt = [r for r in reasons if r.startswith("DKMS has not built")]
    if unbuilt:
        raise OperationError("; ".join(unbuilt) + " — a reboot now would boot without the driver; see `dkms status`")
    if not allow_reboot:
        raise OperationError("; ".join(reasons) + " — reboot, then run again (or pass --data reboot=true)")
    # a reboot interrupts service: the same preflight as a window (DESIGN.md "Disruption and reboots")
    busy = host.get_fact(RigBusy, port=proxy_port, own_units=own_units or [], lock_files=lock_files or [])
    refused = rig_busy.refusal(busy, f"a reboot is needed ({'; '.join(reasons)})")
    if refused and not force:
        raise OperationError(refused)
    yield from reboot._inner(reboot_timeout=reboot_timeout)

    def confirm(state, host):  # noqa: F811 - pyinfra passes (state, host) by name
        after = reboot_reasons(host.get_fact(KernelState), host.get_fact(DkmsStatus), driver_version, flavour)
        if after:
            raise OperationError("still pending after the reboot: " + "; ".join(after))

    yield FunctionCommand(confirm, (), {})
