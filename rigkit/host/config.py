"""The one host config (DESIGN.md "The host side"): ``/etc/rigkit/host.json``, rendered by the deploy
like every other file (:func:`rigkit.render.files.render_host_config`) and read by every host command.
No host module names a port or a path of its own: they all come from here.

Its shape (``version`` 1)::

    {"version": 1,
     "llama_swap": {"url": "http://127.0.0.1:<port>", "port": int, "unit": "llama-swap.service",
                    "config": path, "staging": path, "health_timeout_s": s},
     "resident": member id (the first preloaded member),
     "members": {id: {"role": "resident"|"on-demand", "proxy": url|null, "use_model_name": str|null,
                      "container": str|null, "watched": bool}},
     "tenants": {name: {"unit": "hyperqwen.service", "port": int, "model": str, "member": id,
                        "env": the tenant's .env path (the sweep installs its settings there)}},
     "watchdog": {"members": [id], "failures": int, "backoff_after": int, "backoff_s": s,
                  "backoff_max_s": s, "timeout_s": s},
     "keeper": {"timeout_s": s},
     "power": {"limit_w": W (gpu_power_limit_w), "index": GPU index},
     "vram": {"idle_mib": MiB (vram_idle_mib), "release_timeout_s": s (vram_release_timeout_s), "index": GPU index},
     "metrics": {"textfile_dir": node_exporter's textfile folder | null (nothing written), rigkit.host.promfile},
     "paused_timers": [unit], "lock_files": [path], "own_units": [unit],
     "paths": {"state_dir", "lock", "window_journal", "windows_dir", "holds", "activate_log",
               "watchdog_state", "power_state", "models_root", "generations", "hf_token_file", "api_key_file", "agent_bin"}}

``RIGKIT_HOST_CONFIG`` points the host commands at another file (the unit tests do).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DEFAULT_PATH = "/etc/rigkit/host.json"
ENV = "RIGKIT_HOST_CONFIG"
VERSION = 1


class ConfigError(RuntimeError):
    """The host config is missing or malformed; the message names the file and the key."""


class HostConfig:
    """The parsed host config (module docstring) with accessors; ``data`` is the raw dict."""

    def __init__(self, data: dict[str, Any], source: str = DEFAULT_PATH) -> None:
        self.data, self.source = data, source

    def get(self, *keys: str) -> Any:
        """``data[k1][k2]...``; raises ConfigError naming the dotted key when absent."""
        cur: Any = self.data
        for i, k in enumerate(keys):
            if not isinstance(cur, dict) or k not in cur:
                raise ConfigError(f"{self.source}: no `{'.'.join(keys[:i + 1])}` (re-run the deploy: it renders this file)")
            cur = cur[k]
        return cur

    def path(self, name: str) -> Path:
        """``paths.<name>`` as a Path."""
        return Path(self.get("paths", name))

    @property
    def proxy_url(self) -> str:
        """llama-swap's base URL on this host (``http://127.0.0.1:<port>``)."""
        return str(self.get("llama_swap", "url")).rstrip("/")

    @property
    def proxy_port(self) -> int:
        """llama-swap's port."""
        return int(self.get("llama_swap", "port"))

    @property
    def resident(self) -> str | None:
        """The resident member's id (Strata)."""
        return self.data.get("resident")

    @property
    def vram_idle(self) -> tuple[float, float, int]:
        """``(timeout_s, idle_mib, index)`` for :func:`rigkit.host.gpu.wait_idle`: how long a new
        tenant's start waits (s) for the GPU's memory to be back at or below ``idle_mib`` (MiB, no
        compute app listed) on GPU ``index`` (``vram.*``; ConfigError when absent)."""
        return (float(self.get("vram", "release_timeout_s")), float(self.get("vram", "idle_mib")),
                int(self.get("vram", "index")))

    @property
    def own_units(self) -> list[str]:
        """rigkit's own units, whose requests are not client traffic."""
        return list(self.data.get("own_units") or [])


def load(path: str | os.PathLike | None = None) -> HostConfig:
    """Read the host config from ``path`` (default ``$RIGKIT_HOST_CONFIG`` or :data:`DEFAULT_PATH`).
    Raises ConfigError when it is missing, not JSON or not this version."""
    p = Path(path or os.environ.get(ENV) or DEFAULT_PATH)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: no host config (the deploy renders it; run `rigkit deploy`)") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{p}: unreadable host config ({exc})") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ConfigError(f"{p}: not a version-{VERSION} rigkit host config")
    return HostConfig(data, str(p))
