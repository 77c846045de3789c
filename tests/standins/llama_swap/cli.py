"""Command line of the stand-in, held to upstream ``llama-swap.go``.

Flags (Go ``flag`` syntax: ``-flag value``, ``-flag=value``, ``--flag``; booleans take
no value): ``-config`` (required), ``-config-dir``, ``-listen`` (default ``:8080``),
``-watch-config`` (2 s stat polling; SIGHUP reloads too), ``-version``,
``-tls-cert-file``/``-tls-key-file`` (refused: the stand-in serves plain HTTP).

Exit codes: 0 after a clean SIGTERM/SIGINT shutdown or ``-version``; 1 when the config
fails to load or the server cannot be built/bound (``slog.Error`` line on stderr,
as upstream); 2 for a flag error (Go ``flag.ExitOnError``).
"""

from __future__ import annotations

import glob
import os
import signal
import sys
import threading
from typing import Dict, List, Optional

import yaml

from .config import Config, ConfigError, check_router, load_config_text, substitute_env_macros
from .log import Logger, slog_error
from .server import App, make_server
from .version import BUILD_DATE, COMMIT, VERSION

SHUTDOWN_TIMEOUT_S = 30.0
STRING_FLAGS = {"config": "path to config file (required)",
                "config-dir": "directory of additional *.yaml/*.yml config fragments",
                "listen": "listen address (default :8080 or :8443 for TLS)",
                "tls-cert-file": "TLS certificate file",
                "tls-key-file": "TLS key file"}
BOOL_FLAGS = {"version": "show version and exit", "watch-config": "reload config on file change"}


class FlagError(Exception):
    pass


def _usage() -> str:
    lines = ["Usage of llama-swap:"]
    for name in sorted(list(STRING_FLAGS) + list(BOOL_FLAGS)):
        if name in STRING_FLAGS:
            lines.append("  -%s string\n    \t%s" % (name, STRING_FLAGS[name]))
        else:
            lines.append("  -%s\n    \t%s" % (name, BOOL_FLAGS[name]))
    return "\n".join(lines) + "\n"


def parse_flags(argv: List[str]) -> Dict[str, object]:
    """Parse Go-style flags. Returns ``{name: value}``; raises FlagError with Go's wording."""
    out: Dict[str, object] = {"listen": "", "config": "", "config-dir": "", "version": False,
                              "watch-config": False, "tls-cert-file": "", "tls-key-file": ""}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            break
        if not a.startswith("-") or a == "-":
            break
        name = a[2:] if a.startswith("--") else a[1:]
        value: Optional[str] = None
        if "=" in name:
            name, value = name.split("=", 1)
        if name in ("h", "help"):
            raise FlagError("help")
        if name in BOOL_FLAGS:
            if value is None:
                out[name] = True
            elif value.lower() in ("1", "t", "true"):
                out[name] = True
            elif value.lower() in ("0", "f", "false"):
                out[name] = False
            else:
                raise FlagError('invalid boolean value "%s" for -%s: parse error' % (value, name))
        elif name in STRING_FLAGS:
            if value is None:
                i += 1
                if i >= len(argv):
                    raise FlagError("flag needs an argument: -%s" % name)
                value = argv[i]
            out[name] = value
        else:
            raise FlagError("flag provided but not defined: -%s" % name)
        i += 1
    return out


_UNIQUE_SECTIONS = ("models", "groups", "profiles", "selectors", "peers", "matrix")


def _merge(dst, src, path: List[str]):
    """Merge a ``-config-dir`` fragment (notes/llama-swap.md §1.5). Error wording is the
    stand-in's own: upstream ``internal/config/merge.go`` was not read for it."""
    for k, v in src.items():
        if k not in dst:
            dst[k] = v
            continue
        here = path + [str(k)]
        if len(path) >= 1 and path[-1] in _UNIQUE_SECTIONS and len(path) <= 4:
            raise ConfigError("config-dir: %s defined in more than one file" % ".".join(here))
        if isinstance(dst[k], dict) and isinstance(v, dict):
            _merge(dst[k], v, here)
        elif isinstance(dst[k], list) and isinstance(v, list):
            dst[k] = dst[k] + v
        elif dst[k] != v:
            raise ConfigError("config-dir: conflicting values for %s" % ".".join(here))


def load(path: str, config_dir: str = "") -> Config:
    """Load ``path`` plus any ``config_dir`` fragments. Raises OSError, ConfigError."""
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    if not config_dir:
        return load_config_text(text)
    merged = yaml.safe_load(substitute_env_macros(text)) or {}
    files = sorted(glob.glob(os.path.join(config_dir, "*.yaml")) + glob.glob(os.path.join(config_dir, "*.yml")))
    for fn in files:
        with open(fn, "r", encoding="utf-8") as f:
            frag = yaml.safe_load(substitute_env_macros(f.read())) or {}
        if isinstance(frag, dict):
            _merge(merged, frag, [])
    return load_config_text(yaml.safe_dump(merged, sort_keys=False))


def _go_os_error(path: str, e: OSError) -> str:
    msg = (e.strerror or str(e))
    return "open %s: %s" % (path, msg[:1].lower() + msg[1:])


def main(argv: Optional[List[str]] = None) -> int:
    """Run the stand-in; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        flags = parse_flags(argv)
    except FlagError as e:
        if str(e) == "help":
            sys.stderr.write(_usage())
            return 0
        sys.stderr.write("%s\n%s" % (e, _usage()))
        return 2

    if flags["version"]:
        print("version: %s (%s), built at %s" % (VERSION, COMMIT, BUILD_DATE))
        return 0
    config_path = str(flags["config"])
    if not config_path:
        slog_error("-config is required")
        return 1
    if flags["tls-cert-file"] or flags["tls-key-file"]:
        slog_error("the rigkit llama-swap stand-in does not serve TLS")
        return 1
    listen = str(flags["listen"]) or ":8080"
    config_dir = str(flags["config-dir"])

    try:
        cfg = load(config_path, config_dir)
    except OSError as e:
        slog_error("failed to load config", path=config_path, error=_go_os_error(config_path, e))
        return 1
    except ConfigError as e:
        slog_error("failed to load config", path=config_path, error=str(e))
        return 1

    out = cfg.log_to_stdout
    proxylog = Logger(out in ("proxy", "both"), cfg.log_level, cfg.log_time_format)
    upstreamlog = Logger(out in ("upstream", "both"))

    try:
        check_router(cfg)
    except ConfigError as e:
        slog_error("failed to create server", error=str(e))
        return 1
    app = App(cfg, proxylog, upstreamlog)
    try:
        server = make_server(listen, app)
    except (OSError, ValueError) as e:
        reason = "bind: address already in use" if getattr(e, "errno", None) == 98 else str(e)
        slog_error("http server error", error="listen tcp %s: %s" % (listen, reason))
        return 1

    proxylog.info("llama-swap listening on http://%s" % listen)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    app.start_preload()

    stop_sig: List[str] = []
    wake = threading.Event()
    reload_lock = threading.Lock()

    def reload() -> None:
        if not reload_lock.acquire(blocking=False):
            return
        try:
            proxylog.info("reloading configuration")
            try:
                new_cfg = load(config_path, config_dir)
                check_router(new_cfg)
            except (OSError, ConfigError) as e:
                proxylog.warn("failed to reload config: %s" % e)
                return
            old = server.app
            new_app = App(new_cfg, proxylog, upstreamlog)
            new_app.start_preload()
            server.app = new_app
            old.router.shutdown(SHUTDOWN_TIMEOUT_S)
            proxylog.info("configuration reloaded")
        finally:
            reload_lock.release()

    def on_signal(signum, _frame) -> None:
        if signum == signal.SIGHUP:
            proxylog.info("received SIGHUP, reloading config")
            threading.Thread(target=reload, daemon=True).start()
            return
        stop_sig.append("terminated" if signum == signal.SIGTERM else "interrupt")
        wake.set()

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)

    if flags["watch-config"]:
        proxylog.info("watching configuration for changes (poll-based, 2s interval)")

        def stamp():
            paths = [config_path]
            if config_dir:
                paths += sorted(glob.glob(os.path.join(config_dir, "*.y*ml")))
            res = []
            for p in paths:
                try:
                    st = os.stat(p)
                    res.append((p, st.st_mtime_ns, st.st_size))
                except OSError:
                    res.append((p, None, None))
            return res

        def watch() -> None:
            last = stamp()
            while not wake.wait(2.0):
                cur = stamp()
                if cur != last:
                    last = cur
                    reload()

        threading.Thread(target=watch, daemon=True).start()

    while not wake.wait(1.0):
        pass
    proxylog.info("received signal %s, shutting down" % (stop_sig[0] if stop_sig else "terminated"))
    server.shutdown()
    server.server_close()
    server.app.router.shutdown(SHUTDOWN_TIMEOUT_S)
    proxylog.info("shutdown complete")
    return 0
