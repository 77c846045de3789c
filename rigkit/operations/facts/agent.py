"""Facts the host agent answers (``rigkit-agent``): each locked model's status, a recorded generation."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pyinfra.api import FactBase

from rigkit.operations.facts.util import RC_MARK, split_rc


class ModelStatus(FactBase):
    """Whether each locked model is converged on the host, from the host agent:
    ``rigkit-agent status --lock LOCK --model NAME [--prepared]`` (names in ``prepared`` must be
    recorded after HyperQwen's prepare) (JSON ``{"model", "converged", "reasons"}``,
    see :func:`rigkit.host.modelrecords.status`). Returns ``{name: [reasons]}`` (empty list: converged); a
    host without the agent yet gets ``["host agent not installed"]`` for every model."""

    def command(self, agent: str, lock: str, names: list[str], prepared: list[str] | None = None) -> str:
        self._names = list(names)
        prepared = prepared or []
        failed = {n: json.dumps({"model": n, "converged": False, "reasons": ["status failed"]}) for n in names}
        checks = "; ".join(shlex.join([agent, "status", "--lock", lock, "--model", n, *(["--prepared"] if n in prepared else [])])
                           + f" 2>/dev/null || echo {shlex.quote(failed[n])}" for n in names)
        return f"if [ -x {shlex.quote(agent)} ] && [ -f {shlex.quote(lock)} ]; then {checks}; else echo {RC_MARK}1; fi"

    def process(self, output: list[str]) -> dict[str, list[str]]:
        names = getattr(self, "_names", [])
        lines, rc = split_rc(output)
        if rc == 1:
            return {n: ["host agent or lock not installed"] for n in names}
        out: dict[str, list[str]] = {n: ["no status"] for n in names}
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and item.get("model") in out:
                out[item["model"]] = [] if item.get("converged") else list(item.get("reasons") or ["not converged"])
        return out


class GenerationBundle(FactBase):
    """One recorded generation with its stored files: ``rigkit-agent generation show N --files``
    (:func:`rigkit.host.generations.show`: ``{"record": {...}, "contents": {path: text}}``), or
    ``{"error": "..."}`` when the host has no such generation or no agent."""

    def command(self, agent: str, n: int) -> str:
        return f"{shlex.quote(agent)} generation show {int(n)} --files 2>&1; echo {RC_MARK}$?"

    def process(self, output: list[str]) -> dict[str, Any]:
        lines, rc = split_rc(output)
        text = "\n".join(lines)
        if rc == 0:
            try:
                data = json.loads(lines[-1])
            except (ValueError, IndexError):
                return {"error": f"not a generation: {text[-300:]}"}
            return data if isinstance(data, dict) else {"error": "not a generation"}
        return {"error": text.strip()[-300:] or f"exit {rc}"}
