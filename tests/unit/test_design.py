"""``../shared/DESIGN.md`` held to the code where the code is the truth (issue #64): the folders its
Layout names against test_layout.py's, the host side's third-party set and what the agent's wheel
ships against :mod:`rigkit.render.wheelhouse` (whose pins are ``pyproject.toml``'s), every unit the
deploy installs for the agent named, and every ``tests/…`` path and ``DESIGN.md "Section"`` that
rigkit's code cites existing.

DESIGN.md is read-only to a session; a disagreement an issue asks for is listed, with its reason, in
tests/unit/design_exceptions.py — the test then passes and prints the list as a warning in pytest's
summary; an entry that no longer disagrees fails it."""

from __future__ import annotations

import os
import re
import warnings
from functools import lru_cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from hypothesis import assume, given, settings, strategies as st

from rigkit import paths
from rigkit.render import wheelhouse
from tests.unit import design_exceptions, test_layout

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("RIGKIT_SHARED", ROOT.parent / "shared"))
DESIGN = SHARED / "DESIGN.md"
#: Where rigkit's code cites DESIGN.md's sections and the tests.
CITING = ("rigkit", "roles", "templates", "deploy.py")


class DesignDisagreement(UserWarning):
    """A disagreement between DESIGN.md and the code that design_exceptions.py lists, with its reason."""


@lru_cache(maxsize=1)
def design() -> str:
    assert DESIGN.is_file(), f"{DESIGN}: the shared design notes are missing (RIGKIT_SHARED moves ../shared)"
    return DESIGN.read_text()


def flat(text: str) -> str:
    """``text`` with every run of white space one space (a sentence may wrap anywhere)."""
    return " ".join(text.split())


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def names_in_list(words: str) -> list[str]:
    """``"a, b, c and d"`` / ``"a, b or c"`` → ``["a", "b", "c", "d"]``."""
    return [w.strip(" `") for w in re.split(r",\s*|\s+(?:and|or)\s+", words) if w.strip(" `")]


def sections(text: str) -> set[str]:
    """The names a citation may give a section of ``text``: each ``## heading`` and each paragraph's
    bold lead (``**Secrets.**``), whole, and short — cut at `` (`` or ``,`` (``The rig (the real
    target)`` → ``The rig``; ``Exit codes, every rigkit command.`` → ``Exit codes``); quotes and the
    final full stop dropped."""
    titles = re.findall(r"(?m)^#+ (.+?)\s*$", text) + re.findall(r"(?m)^\*\*(.+?)\*\*", text)
    out = set()
    for t in titles:
        t = t.strip().rstrip(".").strip('"').replace('".', "").strip('"')
        out |= {t, re.split(r" \(|,", t)[0].strip()}
    return out


def layout_lines(text: str) -> list[str]:
    """The lines of the fenced block of DESIGN.md's "Layout (the rooms)"."""
    part = text.split("## Layout", 1)[1]
    return part.split("```", 2)[1].splitlines()[1:]


def layout_folders(text: str) -> dict[str, set[str]]:
    """What the Layout block names: ``top`` (entries at the project's root: ``deploy.py``, ``roles/``),
    ``rigkit`` (rigkit's folders: indented under ``rigkit/``, or written ``rigkit/x/``) and ``tests``
    (the folders the ``tests/`` line lists)."""
    top, rigkit, tests = set(), set(), set()
    for line in layout_lines(text):
        if not line.strip():
            continue
        first = line.split()[0]
        if line.startswith("  "):
            rigkit.add(first.rstrip("/"))
        elif first.startswith("rigkit/") and first.count("/") == 2:
            rigkit.add(first.split("/")[1])
        else:
            top.add(first)
            if first == "tests/":
                tests |= {w.rstrip("/,") for w in re.findall(r"\b\w+/", line.split(None, 1)[1])}
    return {"top": top, "rigkit": rigkit, "tests": tests}


def host_side(text: str) -> dict[str, list[str]]:
    """From "The host side": ``third_party`` (the distributions after "standard library plus"),
    ``ships`` (the rigkit folders the agent's wheel holds: ``rigkit/host/`` and what "it ships with")
    and ``control_only`` (what "never the control side's" names)."""
    para = flat(text.split("**The host side.**", 1)[1].split("\n\n", 1)[0])
    third = re.search(r"standard library plus (.+?) \(`AGENT_REQUIREMENTS`", para)
    ships = re.search(r"is `rigkit/host/`; it ships with (.+?) as one wheel", para)
    never = re.search(r"never the control side's (.+?);", para)
    assert third and ships and never, f"DESIGN.md \"The host side\" no longer reads as this test expects: {para[:300]}"
    return {"third_party": names_in_list(third.group(1)),
            "ships": ["host", *re.findall(r"`rigkit/(\w+)/`", ships.group(1))],
            "control_only": names_in_list(never.group(1))}


def pyproject_dependencies() -> dict[str, str]:
    """``{canonical name: the requirement as written}`` of pyproject.toml's ``[project] dependencies``."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {canonical(re.match(r"[A-Za-z0-9._-]+", d).group(0)): d for d in deps}


def bench_third_party(text: str) -> set[str]:
    """The distributions (canonical names) DESIGN.md's Layout line for ``rigkit/bench/`` adds to the
    standard library: the words after ``+`` that are dependencies of the project."""
    line = next(ln for ln in layout_lines(text) if ln.startswith("rigkit/bench/"))
    deps = pyproject_dependencies()
    return {canonical(w) for w in re.findall(r"[\w.-]+", line.split("+", 1)[1]) if canonical(w) in deps}


@lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    return packages_distributions()


def distributions_of(modules: set[str]) -> set[str]:
    """The distributions (canonical names) that provide the import names ``modules`` (``pynvml`` →
    ``nvidia-ml-py``); a name no distribution provides stays as it is."""
    found = _packages_distributions()
    return {canonical(d) for m in modules for d in found.get(m, [m])}


def expand(word: str) -> list[str]:
    """Shell brace expansion of one word: ``rigkit-{a,b}.service`` → ``rigkit-a.service``, ``rigkit-b.service``."""
    m = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if not m:
        return [word]
    return [x for alt in m.group(1).split(",") for x in expand(word[:m.start()] + alt + word[m.end():])]


def named_units(text: str) -> tuple[set[str], set[str]]:
    """``(unit names, bare names)`` DESIGN.md writes in code spans, brace-expanded: a unit name ends
    in ``.service``/``.timer``; a bare name is a span of one word (the agent's timers are named by
    stem, "each ``.{service,timer}``")."""
    units, bare = set(), set()
    for span in re.findall(r"`([^`]+)`", text):
        for word in span.split():
            for w in expand(word.strip(",;")):
                if w.endswith((".service", ".timer")):
                    units.add(w)
                elif re.fullmatch(r"[a-z][a-z0-9-]+", w):
                    bare.add(w)
    return units, bare


def installed_units() -> set[str]:
    """The units the deploy installs for the rig and the agent: the rendered ones in
    ``/etc/systemd/system/`` (the default spec) and the transient units the agent runs in."""
    from rigkit.render.files import AGENT_TRANSIENT_UNITS, render
    from rigkit.spec.validate import spec_from_dict

    files = render(spec_from_dict({}))
    return {Path(p).name for p in files if p.startswith(paths.UNIT_DIR + "/")} | set(AGENT_TRANSIENT_UNITS)


#: ``DESIGN.md "Section"`` (also ``DESIGN.md job 2, "…"``, and across a comment's line break).
CITED_SECTION = re.compile(r'DESIGN\.md(?: job \d+,)?[ \t]*(?:\n[ \t]*(?:#:?)?[ \t]*)?"([^"\n]+)"')
#: A path under the project's ``tests/`` (not ``../shared/…``, not inside a longer path).
CITED_TEST = re.compile(r'(?<![\w/.-])tests/[\w./-]*\w/?')


def citing_files(root: Path = ROOT) -> list[Path]:
    out = []
    for where in CITING:
        p = root / where
        out += [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".py", ".j2"))
    return out


def citations(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """``[(kind, "file:line", cited)]``: ``kind`` ``section`` for each ``DESIGN.md "X"``, ``tests path`` for
    each ``tests/…`` path, over :data:`CITING`."""
    out = []
    for path in citing_files(root):
        text = path.read_text()
        rel = path.relative_to(root).as_posix()
        for kind, rx in (("section", CITED_SECTION), ("tests path", CITED_TEST)):
            for m in rx.finditer(text):
                out.append((kind, f"{rel}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1) if m.groups() else m.group(0)))
    return out


def disagreements(text: str, root: Path = ROOT) -> list[tuple[str, str, str]]:
    """``[(check, item, what disagrees)]`` between DESIGN.md's ``text`` and the code under ``root``."""
    out: list[tuple[str, str, str]] = []
    lay = layout_folders(text)
    for f in sorted(lay["rigkit"] ^ test_layout.FOLDERS):
        said = "DESIGN.md's Layout names it" if f in lay["rigkit"] else "test_layout.py's FOLDERS has it"
        out.append(("folders", f, f"rigkit/{f}/: {said}, the other does not"))
    for entry in sorted(lay["top"]):
        if not (root / entry).exists():
            out.append(("layout", entry, f"DESIGN.md's Layout names {entry}; the project has none"))
    real_tests = {p.name for p in (root / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    for f in sorted(lay["tests"] ^ real_tests):
        said = "DESIGN.md's Layout names it" if f in lay["tests"] else "the project has it"
        out.append(("tests folders", f, f"tests/{f}/: {said}, the other does not"))
    host = host_side(text)
    said = {canonical(n) for n in host["third_party"]}
    agent = {canonical(n) for n in wheelhouse.AGENT_PACKAGES}
    for n in sorted(said ^ agent):
        where = "DESIGN.md \"The host side\" names it" if n in said else "wheelhouse.AGENT_PACKAGES has it"
        out.append(("host third-party", n, f"{n}: {where}, the other does not"))
    for n in sorted(set(host["ships"]) ^ set(wheelhouse.HOST_PACKAGES)):
        where = "DESIGN.md \"The host side\" ships it" if n in host["ships"] else "wheelhouse.HOST_PACKAGES has it"
        out.append(("host ships", n, f"rigkit/{n}/: {where}, the other does not"))
    deps = pyproject_dependencies()
    for n in host["control_only"]:
        if canonical(n) in agent or canonical(n) not in deps:
            out.append(("control only", n, f"{n}: DESIGN.md calls it the control side's only; "
                        + ("the agent installs it" if canonical(n) in agent else "pyproject.toml does not list it")))
    bench = bench_third_party(text)
    for n in sorted(bench ^ distributions_of(test_layout.BENCH_THIRD_PARTY)):
        where = "DESIGN.md's Layout gives rigkit/bench/ it" if n in bench else "test_layout.BENCH_THIRD_PARTY has it"
        out.append(("bench third-party", n, f"{n}: {where}, the other does not"))
    units, bare = named_units(text)
    for unit in sorted(installed_units()):
        if unit not in units and unit.rsplit(".", 1)[0] not in bare:
            out.append(("units", unit, f"{unit}: the deploy installs it; DESIGN.md does not name it"))
    known = sections(text)
    for kind, where, cited in citations(root):  # listed by file and text, not line: a line moves
        item = f"{where.rsplit(':', 1)[0]}: {cited}"
        if kind == "section" and cited not in known:
            out.append(("section", item, f"{where} cites DESIGN.md \"{cited}\": no such section"))
        elif kind == "tests path" and not (root / cited).exists():
            out.append(("tests path", item, f"{where} cites {cited}: no such file"))
    return out


def test_the_design_agrees_with_the_code():
    """Every disagreement is listed in design_exceptions.py with its reason (printed as a warning);
    every entry there still disagrees."""
    found = disagreements(design())
    listed = design_exceptions.EXCEPTIONS
    keys = {(check, item) for check, item, _ in found}
    new = [f"[{check}] {why}" for check, item, why in found if (check, item) not in listed]
    stale = [f"{key}: {reason}" for key, reason in listed.items() if key not in keys]
    assert not new, ("DESIGN.md and the code disagree (fix the code, or list it in tests/unit/design_exceptions.py "
                     "with the issue that asks for it):\n" + "\n".join(new))
    assert not stale, "design_exceptions.py lists what no longer disagrees (take it out):\n" + "\n".join(stale)
    for check, item, why in found:
        warnings.warn(DesignDisagreement(f"[{check}] {why} — listed: {listed[(check, item)]}"), stacklevel=1)


def test_the_readers_find_what_design_says():
    """The parsers read DESIGN.md's real text (a change of its wording fails here, not silently)."""
    text = design()
    lay = layout_folders(text)
    assert {"cli", "spec", "drift", "common", "bench", "host"} <= lay["rigkit"]
    assert {"deploy.py", "roles/", "rigkit/", "tests/"} <= lay["top"] and {"unit", "harness"} <= lay["tests"]
    host = host_side(text)
    assert "requests" in host["third_party"] and "pydantic" in host["control_only"]
    assert host["ships"][:1] == ["host"] and "common" in host["ships"]
    assert {"requests", "nvidia-ml-py"} <= bench_third_party(text)
    assert distributions_of({"pynvml", "yaml"}) == {"nvidia-ml-py", "pyyaml"}
    units, bare = named_units(text)
    assert {"llama-swap.service", "rigkit-window.service"} <= units and "rigkit-keeper" in bare
    assert {"Secrets", "The host side", "Exit codes", "The rig", "Converged"} <= sections(text)
    assert sum(kind == "section" for kind, _, _ in citations()) > 40


def test_the_checks_can_fail(tmp_path):
    """A DESIGN.md that says otherwise, and code that cites what is not there, are disagreements."""
    text = design()
    assert disagreements(text) is not None
    wrong = (text.replace("rigkit/host/       the rig", "rigkit/hosts/      the rig")
             .replace("PyYAML, huggingface-hub", "PyYAML, numpy, huggingface-hub")
             .replace("`rigkit-{activate,window,lock}.service`", "`rigkit-{activate,window}.service`")
             .replace("tests/             unit/,", "tests/             unit/, fuzz/,"))
    found = {(c, i) for c, i, _ in disagreements(wrong)}
    assert {("folders", "hosts"), ("folders", "host"), ("host third-party", "numpy"),
            ("units", "rigkit-lock.service"), ("tests folders", "fuzz")} <= found
    fake = tmp_path / "rigkit" / "x.py"
    fake.parent.mkdir()
    fake.write_text('"""See DESIGN.md "Secrets" and DESIGN.md\n#: "No such part", tests/unit/nope.py, tests/unit/."""\n')
    assert [(k, c) for k, _, c in citations(tmp_path)] == [
        ("section", "Secrets"), ("section", "No such part"), ("tests path", "tests/unit/nope.py"),
        ("tests path", "tests/unit/")]


# --- the agent's pins: one place, pyproject.toml ------------------------------------------------

def test_the_agents_pins_are_the_projects():
    """The agent's wheelhouse pins each of its packages exactly as pyproject.toml does."""
    deps = pyproject_dependencies()
    assert len(wheelhouse.AGENT_REQUIREMENTS) == len(wheelhouse.AGENT_PACKAGES)
    for req in wheelhouse.AGENT_REQUIREMENTS:
        name, _, version = req.partition("==")
        assert version and deps[canonical(name)].replace(" ", "") == f"{deps[canonical(name)].split('=')[0]}=={version}"


_NAME = st.from_regex(r"[a-z][a-z0-9]{0,6}([-_.][a-z0-9]{1,4})?", fullmatch=True)


@settings(max_examples=25, deadline=None)
@given(pins=st.dictionaries(_NAME, st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}", fullmatch=True), min_size=1,
                            max_size=5),
       spell=st.sampled_from([str.upper, lambda s: s.replace("-", "_"), lambda s: s]))
def test_pinned_reads_each_exact_pin_by_its_canonical_name(tmp_path_factory, pins, spell):
    """Names compared as PEP 503 does (``PyYAML``, ``pyyaml``, ``py_yaml`` alike); a loose or a missing
    pin is refused, naming the package and what pyproject.toml gives."""
    assume(len({canonical(n) for n in pins} | {"loose", "absent-pkg"}) == len(pins) + 2)
    folder = tmp_path_factory.mktemp("proj")
    deps = ",\n".join(f'    "{n}=={v}"' for n, v in pins.items())
    (folder / "pyproject.toml").write_text(f'[project]\nname = "x"\ndependencies = [\n{deps},\n    "loose>=1",\n]\n')
    asked = [spell(n) for n in pins]
    assert wheelhouse.pinned(asked, folder / "pyproject.toml") == tuple(f"{a}=={v}" for a, v in zip(asked, pins.values()))
    with pytest.raises(wheelhouse.WheelhouseError, match=r"^loose: pyproject.toml gives it as '>=1'"):
        wheelhouse.pinned(["loose"], folder / "pyproject.toml")
    with pytest.raises(wheelhouse.WheelhouseError, match=r"^absent-pkg: the agent needs it"):
        wheelhouse.pinned(["absent-pkg"], folder / "pyproject.toml")
