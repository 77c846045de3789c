"""Log lines like upstream's ``internal/logmon``: ``[LEVEL] message`` on stdout.

The proxy logger prints when ``logToStdout`` is ``proxy`` or ``both``; member output
(the upstream logger) when ``upstream`` or ``both``. An unknown ``logLevel`` behaves as
``info`` (upstream ``llama-swap.go`` ``applyLogSettings``).
"""

from __future__ import annotations

import sys
import threading
import time

LEVELS = {"debug": 0, "info": 1, "warn": 2, "error": 3}
_LOCK = threading.Lock()


class Logger:
    """A level-filtered line logger writing to stdout (flushed per line)."""

    def __init__(self, enabled: bool = True, level: str = "info", time_format: str = "") -> None:
        self.enabled = enabled
        self.level = LEVELS.get(level.strip().lower(), 1)
        self.time_format = time_format.strip().lower()

    def _emit(self, lvl: str, msg: str) -> None:
        if not self.enabled or LEVELS[lvl] < self.level:
            return
        prefix = ""
        if self.time_format in ("rfc3339", "rfc3339nano"):
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S%z ")
        line = "%s[%s] %s\n" % (prefix, lvl.upper(), msg)
        with _LOCK:
            try:
                sys.stdout.write(line)
                sys.stdout.flush()
            except (OSError, ValueError):
                pass

    def debug(self, msg: str) -> None:
        self._emit("debug", msg)

    def info(self, msg: str) -> None:
        self._emit("info", msg)

    def warn(self, msg: str) -> None:
        self._emit("warn", msg)

    def error(self, msg: str) -> None:
        self._emit("error", msg)

    def raw(self, text: str) -> None:
        """Pass member output through unchanged (the upstream logger)."""
        if not self.enabled:
            return
        with _LOCK:
            try:
                sys.stdout.write(text)
                sys.stdout.flush()
            except (OSError, ValueError):
                pass


def slog_error(msg: str, **attrs: str) -> None:
    """Go's default ``slog.Error`` line on stderr: ``2006/01/02 15:04:05 ERROR msg k=v``.

    Values are quoted like slog's text output when they contain spaces, ``=``,
    quotes or control characters.
    """
    parts = [time.strftime("%Y/%m/%d %H:%M:%S"), "ERROR", msg]
    for k, v in attrs.items():
        parts.append("%s=%s" % (k, _slog_value(str(v))))
    sys.stderr.write(" ".join(parts) + "\n")
    sys.stderr.flush()


def _slog_value(v: str) -> str:
    if v and not any(c.isspace() or c in '="\\' or ord(c) < 0x20 for c in v):
        return v
    from .config import go_quote

    return go_quote(v)
