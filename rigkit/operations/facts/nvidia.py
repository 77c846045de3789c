"""Facts of NVIDIA's tools: ``nvidia-smi``."""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase

from rigkit.common import gpu
from rigkit.operations.facts.util import RC_MARK, split_rc


class NvidiaSmi(FactBase):
    """The GPUs as ``nvidia-smi`` reports them, or why it cannot: :func:`rigkit.common.gpu.parse_query`
    of ``nvidia-smi --query-gpu=<rigkit.common.gpu.FIELDS> --format=csv,noheader,nounits`` (the host
    side reads the GPU with the same parser). ``missing`` means no ``nvidia-smi`` on PATH.
    """

    def command(self) -> str:
        return (f"command -v nvidia-smi >/dev/null 2>&1 || {{ echo {RC_MARK}127; exit 0; }}; "
                f"{gpu.QUERY_COMMAND} 2>&1; echo {RC_MARK}$?")

    @staticmethod
    def default() -> dict[str, Any]:
        return gpu.parse_query("", 127)

    def process(self, output: list[str]) -> dict[str, Any]:
        lines, rc = split_rc(output)
        return gpu.parse_query("\n".join(lines), rc)
