"""Run ``rigkit ARGS`` as its console script does (:func:`rigkit.cli.main.main`), many times over, each
with its stdout and stderr a terminal (a pty) and then a pipe, recording where each labelled line came
from: every call of :func:`rigkit.cli.common.labelled` (``error:``, ``warn``, …) is noted with the
calling site's ``path:line`` (the caller of ``error``/``warn`` when it came through them; path relative
to the checkout). tests/unit/test_cli_output.py.

A fork server, so that a hundred runs cost less than a hundred interpreters: it imports what every run
imports first — pyinfra's CLI package (which gevent-patches the process, as rigkit's ``main()`` does
first), the spec, the renderers — but no ``rigkit.cli`` module; each run is a fork whose file descriptors
1 and 2 are then the pty or the pipe, and only then imports ``rigkit.cli`` — so its consoles are made
against the terminal or the pipe, as in a real run (rich decides colour when a console is made).

Protocol: one JSON request a line on stdin, ``{"argv": [...], "cwd": PATH, "env": {...}}``; one JSON answer
a line on stdout, ``[[code, text, [sites]] for the terminal, then for the pipe]`` (``text``: stdout and
stderr together, as ``2>&1`` gives them; the terminal's ``\\r\\n`` as ``\\n``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = 200


def _child(argv: list[str], said: int) -> int:
    """In the fork: the hook, then rigkit's own entry point. Returns its exit code."""
    from rigkit.cli import common

    real = common.labelled
    here = Path(common.__file__).resolve()

    def labelled(label, text, **kw):
        frame = sys._getframe(1)
        while Path(frame.f_code.co_filename).resolve() == here and frame.f_code.co_name in ("error", "warn"):
            frame = frame.f_back
        site = f"{Path(frame.f_code.co_filename).resolve().relative_to(ROOT)}:{frame.f_lineno}\n"
        os.write(said, site.encode())
        return real(label, text, **kw)

    common.labelled = labelled  # before any command module imports it by name
    from rigkit.cli.main import main

    sys.argv = ["rigkit", *argv]
    try:
        main()
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the pty's last writer closed it
            break
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks)


def run_one(req: dict, terminal: bool) -> list:
    """``[exit code, text, [sites]]`` of one run (:mod:`this module's <cli_said>` protocol)."""
    import fcntl
    import struct
    import termios

    if terminal:
        read_end, write_end = os.openpty()
        fcntl.ioctl(write_end, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
    else:
        read_end, write_end = os.pipe()
    said_r, said_w = os.pipe()
    from gevent.monkey import get_original

    # the plain fork and waitpid: gevent's own (pyinfra's patching) left the parent's read of a pty that
    # every writer had closed blocked for ever; the child re-initialises gevent's loop itself, as gevent's
    # fork would
    pid = get_original("os", "fork")()
    if pid == 0:  # the run
        code = 1
        try:
            import gevent

            gevent.reinit()
            os.close(read_end)
            os.close(said_r)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.close(write_end)
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            code = _child(req["argv"], said_w)
        except BaseException:  # noqa: BLE001 - a crash is the run's answer (its traceback is in the text)
            import traceback

            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(write_end)
    os.close(said_w)
    text = _read_all(read_end).decode(errors="replace")
    sites = _read_all(said_r).decode().splitlines()
    _, status = get_original("os", "waitpid")(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return [code, text.replace("\r\n", "\n") if terminal else text, sites]


def serve() -> None:
    """Answer requests until stdin ends."""
    import pyinfra_cli  # noqa: F401  (gevent's patching first, as rigkit's main() does)
    import rigkit.bench.workloads  # noqa: F401
    import rigkit.drift  # noqa: F401
    import rigkit.render.files  # noqa: F401
    import rigkit.report.prometheus  # noqa: F401
    import rigkit.spec.inventory  # noqa: F401
    import rigkit.spec.validate  # noqa: F401

    assert not [m for m in sys.modules if m.startswith("rigkit.cli")], "rigkit.cli imported before a run"
    answers = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        req = json.loads(line)
        answers.write(json.dumps([run_one(req, True), run_one(req, False)]) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve()
