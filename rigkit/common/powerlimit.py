"""The GPU power limit: the one way to set it, the one card it is set on and the one rule that says
whether a reading is the declared limit. Used by the deploy's operation
(:mod:`rigkit.operations.gpu`), the boot unit ``gpu-power-limit.service`` (its ``ExecStart`` is
:func:`set_argv`), the healer (:mod:`rigkit.host.power`), a power-limit sweep and its restore
(:mod:`rigkit.host.window.sweep`), the confirmation (:mod:`rigkit.host.confirm`) and drift
(:func:`rigkit.drift.compare.compare_power`); tests/unit/test_one_piece.py fails when any of them
judges or sets the limit another way.

**The tolerance.** ``gpu_power_limit_w`` is whole watts (the spec's ``int``). ``nvidia-smi
--power-limit=W`` hands NVML ``W * 1000`` mW (``nvmlDeviceSetPowerManagementLimit`` takes mW;
NVML API reference, "Device Commands"), and ``power.limit`` / ``enforced.power.limit`` come back
from ``nvmlDeviceGetPowerManagementLimit`` / ``nvmlDeviceGetEnforcedPowerLimit`` in mW, printed by
``nvidia-smi`` in W with two decimals (``Current Power Limit : 320.00 W`` in
``shared/data/gpu-captures/linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt``). A
reading *is* the declared limit when it lies within :data:`TOLERANCE_W` = 0.5 W of it: half the
spec's resolution, so a reading agrees with exactly one whole-watt limit the spec can declare
(``419.9`` and ``420.01`` are 420 W; ``419.4`` is not), and a driver that stores the limit at a
coarser step than 1 mW or rounds the mW it prints is not called drift.

**The card.** :data:`GPU_INDEX`: the rig has one GPU (DESIGN.md) and the spec names no index, so
the one index lives here and the host config's ``power.index``/``vram.index``, the unit and the
operation take it from here.

Setting the limit on this host (running nvidia-smi) is :func:`rigkit.host.powerlimit.set_limit`; the
command it runs is :func:`set_argv` here, which the deploy's operation and the boot unit use too.
"""

from __future__ import annotations


#: The GPU index every power-limit reader and writer uses (the rig's one card).
GPU_INDEX = 0
#: A reading (W) agrees with a declared limit (W) when it lies within this many watts of it.
TOLERANCE_W = 0.5


def limit_agrees(reading_w: float | None, declared_w: float) -> bool:
    """Whether ``reading_w`` (W, from ``power.limit``/``enforced.power.limit``; None when unread)
    is the declared limit ``declared_w`` (W): ``|reading - declared| <= TOLERANCE_W``. An unread
    limit never agrees."""
    return reading_w is not None and abs(float(reading_w) - float(declared_w)) <= TOLERANCE_W


def set_argv(index: int, watts: float, nvidia_smi: str = "nvidia-smi") -> list[str]:
    """The one command that sets GPU ``index``'s power limit to ``watts`` W:
    ``[nvidia_smi, "--id=<index>", "--power-limit=<watts>"]`` (``watts`` printed with ``:g``, so
    ``420`` and ``420.0`` both give ``--power-limit=420``; nvidia-smi(1) ``-pl, --power-limit``)."""
    return [nvidia_smi, f"--id={int(index)}", f"--power-limit={float(watts):g}"]


def read_back_problem(index: int, watts: float, enforced_w: float | None, why: str | None = None) -> str | None:
    """After setting ``watts`` W on GPU ``index``: None when ``enforced_w`` (W, the
    ``enforced.power.limit`` read back; None when unread, ``why`` says why) :func:`limit_agrees`, else the
    sentence saying it did not hold (open modules on some GPUs report success and change nothing:
    open-gpu-kernel-modules#483)."""
    if limit_agrees(enforced_w, watts):
        return None
    got = f"{enforced_w:g} W" if enforced_w is not None else (f"unknown ({why})" if why else "unknown")
    return f"GPU {index}: power limit set to {float(watts):g} W but enforced.power.limit reads {got}"
