"""Facts of mkinitcpio: its effective HOOKS, as mkinitcpio v41 loads its configuration."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase

from rigkit.common import mkinitcpio


class MkinitcpioHooks(FactBase):
    """mkinitcpio's effective HOOKS as mkinitcpio v41 loads its configuration, now and with rigkit's
    drop-in as declared: :func:`rigkit.common.mkinitcpio.parse_load` of ``bash -c``
    :func:`rigkit.common.mkinitcpio.load_script` (the main file, the drop-ins sorted, sourced by bash,
    a string HOOKS made an array): ``{"present", "presets", "dropins", "hooks", "with_rigkit", "error"}``."""

    def command(self) -> str:
        return f"bash -c {shlex.quote(mkinitcpio.load_script())}"

    def requires_command(self, *args, **kwargs) -> str:
        return "bash"

    @staticmethod
    def default() -> dict[str, Any]:
        return mkinitcpio.parse_load([])

    def process(self, output: list[str]) -> dict[str, Any]:
        return mkinitcpio.parse_load(output)
