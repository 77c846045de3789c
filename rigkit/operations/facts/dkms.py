"""Facts of DKMS: ``dkms status``."""

from __future__ import annotations

import re

from pyinfra.api import FactBase


_DKMS = re.compile(r"^(?P<module>[^/,\s]+)/(?P<version>[^,\s]+), (?P<kernel>[^,\s]+), (?P<arch>[^:\s]+): (?P<status>.+)$")


class DkmsStatus(FactBase):
    """``dkms status`` as ``[{"module", "version", "kernel", "arch", "status"}]`` (dkms(8):
    lines ``nvidia/610.57.04, 6.12.60-1-lts, x86_64: installed``: the full driver version, compared with the
    declared one by :func:`rigkit.common.versions.agrees`); empty without dkms."""

    def requires_command(self, *args, **kwargs) -> str:
        return "dkms"

    def command(self) -> str:
        return "dkms status 2>/dev/null || true"

    @staticmethod
    def default() -> list[dict[str, str]]:
        return []

    def process(self, output: list[str]) -> list[dict[str, str]]:
        out = []
        for line in output:
            m = _DKMS.match(line.strip())
            if m:
                out.append(m.groupdict())
        return out
