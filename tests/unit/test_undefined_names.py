"""No module of the project uses a name it never defined or imported (pyflakes' undefined-name
check over rigkit/, roles/, deploy.py, benchmarks/ and tests/). A NameError in a path the fast tier
does not run (a cache miss, an error branch) otherwise waits for the sandbox, or for the rig: a
merge once left ``atomic`` unimported in rigkit/cache.py, and only a cold cache found it."""
from __future__ import annotations

from pathlib import Path

from pyflakes import api, messages, reporter

ROOT = Path(__file__).resolve().parents[2]
UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


class _Collect(reporter.Reporter):
    def __init__(self) -> None:
        self.found: list[str] = []

    def flake(self, message) -> None:
        if isinstance(message, UNDEFINED):
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text) -> None:  # noqa: N802 (pyflakes' API)
        self.found.append(f"{filename}:{lineno}: syntax error: {msg}")

    def unexpectedError(self, filename, msg) -> None:  # noqa: N802
        self.found.append(f"{filename}: {msg}")


def test_no_module_uses_an_undefined_name():
    rep = _Collect()
    files = [p for d in ("rigkit", "roles", "benchmarks", "tests") for p in sorted((ROOT / d).rglob("*.py"))
             if "__pycache__" not in p.parts]
    for path in [ROOT / "deploy.py", *files]:
        api.checkPath(str(path), rep)
    assert rep.found == []


def test_the_check_sees_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    return atomic.write_bytes('x', b'')\n")
    rep = _Collect()
    api.checkPath(str(bad), rep)
    assert len(rep.found) == 1 and "undefined name 'atomic'" in rep.found[0]
