"""The GPU power limit, set with ``nvidia-smi`` and read back."""

from __future__ import annotations

from pyinfra import host, state
from pyinfra.api import FunctionCommand, OperationError, operation

from rigkit.common.gpu import card, power_limit_problem
from rigkit.common.powerlimit import GPU_INDEX, limit_agrees, read_back_problem, set_argv
from rigkit.operations.facts.nvidia import NvidiaSmi
from rigkit.operations.shell import argv


@operation()
def gpu_power_limit(watts: int, index: int = GPU_INDEX):
    """Set GPU ``index``'s power limit to ``watts`` W now and read it back.

    + watts: the limit in W; must lie within the card's ``power.min_limit``..``power.max_limit``
    + index: the GPU index

    No change when ``power.limit`` and ``enforced.power.limit`` already agree with ``watts``
    (:func:`rigkit.common.powerlimit.limit_agrees`, the one tolerance). When
    ``nvidia-smi`` cannot answer, the plan (``--dry``) predicts the change (an earlier operation may
    restore the driver it needs) and a real run fails naming why. After
    ``nvidia-smi --power-limit`` the enforced limit is read back: open modules on some GPUs
    report success and change nothing (open-gpu-kernel-modules#483). The unit
    ``gpu-power-limit.service`` re-applies it at boot.

    **Example:**

    .. code:: python

        from rigkit.operations.gpu import gpu_power_limit
        gpu_power_limit(
            name="Set the GPU power limit to 420 W",
            watts=420,
            index=0,
        )
    """
    gpu, why = card(host.get_fact(NvidiaSmi), index)
    if gpu is None and not state.is_executing:
        # the plan (--dry, or the prepare stage): nvidia-smi may not answer *yet* — a pin an earlier
        # operation restores (a driver upgraded past it: "Driver/library version mismatch"); predict
        # the change instead of failing the whole plan. Run for real, it is an error as before.
        host.noop(f"GPU {index}: nvidia-smi cannot answer now ({why}); the run sets {watts} W once it does")
        yield argv(*set_argv(index, watts))
        return
    if gpu is None:
        raise OperationError(why)
    problem = power_limit_problem(watts, gpu["power_min_w"], gpu["power_max_w"], f"GPU {index}")
    if problem:
        raise OperationError(problem)
    if limit_agrees(gpu["power_limit_w"], watts) and limit_agrees(gpu["power_enforced_w"], watts):
        host.noop(f"GPU {index} power limit is {watts} W")
        return
    yield argv(*set_argv(index, watts))

    def read_back(state, host):  # noqa: F811
        g, why = card(host.get_fact(NvidiaSmi), index)
        problem = read_back_problem(index, watts, g["power_enforced_w"] if g else None, why)
        if problem:
            raise OperationError(problem)

    yield FunctionCommand(read_back, (), {})
