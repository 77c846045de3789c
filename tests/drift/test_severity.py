"""One severity per kind of finding (:mod:`rigkit.drift.severity`), the same in docs/operating.md's table,
in every finding the code makes, in drift's exit codes and counts, and in the report's words."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rigkit import exitcodes
from rigkit.drift import run as drift
from rigkit.drift import severity
from rigkit.drift.compare import Finding, apply_window, compare_holds, compare_power_healer
from rigkit.drift.severity import KINDS, SEVERITIES

ROOT = Path(__file__).resolve().parents[2]


def readme_table() -> dict[str, tuple[int, bool, set[str]]]:
    """The severity table of docs/operating.md ("Drift: one probe per host"): ``{severity: (exit code, counted, kinds)}``."""
    text = (ROOT / "docs" / "operating.md").read_text()
    start = text.index("| severity | exit code | counted | kinds | meaning |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = (int(cells[1]), cells[2] == "yes", set(re.findall(r"`([^`]+)`", cells[3])))
    return rows


def test_the_readme_table_is_the_code_table():
    table = readme_table()
    assert list(table) == list(SEVERITIES)
    for sev, (code, is_counted, _meaning) in SEVERITIES.items():
        assert table[sev][:2] == (code, is_counted), sev
        assert table[sev][2] == {k for k, s in KINDS.items() if s == sev}, sev


def test_every_kind_the_code_makes_has_its_severity_in_the_table():
    made = {}
    for path in sorted((ROOT / "rigkit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" and len(node.args) > 1:
                kind = node.args[1]
                assert isinstance(kind, ast.Constant), f"{path}:{node.lineno}: a finding's kind is a literal"
                made.setdefault(kind.value, f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(made) > 20  # the premise: the walk finds the comparisons' findings
    missing = {k: where for k, where in made.items() if k not in KINDS}
    assert not missing, f"kinds without a severity in rigkit.drift.severity.KINDS: {missing}"
    assert not set(KINDS) - set(made), "kinds in the table that no code makes"


def test_no_finding_chooses_its_own_severity():
    for path in sorted((ROOT / "rigkit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
                assert "severity" not in {k.arg for k in node.keywords}, f"{path}:{node.lineno}"


@given(st.lists(st.sampled_from(sorted(KINDS)), max_size=8))
def test_exit_code_and_counts_follow_the_table(kinds):
    found = [Finding("h", k, f"item {i}", "d", "a") for i, k in enumerate(kinds)]
    assert [f.severity for f in found] == [KINDS[k] for k in kinds]
    want = exitcodes.FAILED if "error" in {KINDS[k] for k in kinds} else \
        exitcodes.FINDINGS if "drift" in {KINDS[k] for k in kinds} else exitcodes.OK
    assert drift.exit_code(found) == want
    (status,) = [r for r in drift.document(found, {"h": want}, ["h"], "inv.py") if r["kind"] == "status"]
    assert status["exit_code"] == want
    assert status["findings"] == sum(KINDS[k] in ("drift", "error") for k in kinds)
    assert status["warnings"] == sum(KINDS[k] == "warn" for k in kinds)


def test_the_two_holds_are_one_warning_and_exit_0():
    holds = {"data": {
        "llama-swap": {"since": "t", "by": "rigkit wire-in --rollback", "held_back_copy": "/x",
                       "held_back_members": {"added": ["hyperqwen"]}},
        "generation": {"generation": 3, "rolled_back_to": 1, "by": "rigkit rollback", "since": "t"}}}
    found = compare_holds("h", holds)
    assert [(f.kind, f.severity) for f in found] == [("hold", "warn"), ("hold", "warn")]
    assert drift.exit_code(found) == exitcodes.OK


def test_a_power_limit_the_healer_put_back_is_a_warning_naming_what_it_found():
    record = {"declared_w": 420.0, "index": 0, "reapplies": 2,
              "last_reapply": {"at": "2026-12-03T18:56:00Z", "from_w": 300.0, "to_w": 420.0, "enforced_w": 420.0,
                               "ok": True, "message": "re-applied"}}
    (f,) = compare_power_healer("h", record)
    assert (f.kind, f.severity, f.item) == ("power-healed", "warn", "GPU 0 power limit")
    assert f.actual == ("at 2026-12-03T18:56:00Z the healer found 300 W and put back 420 W (enforced 420 W); "
                        "2 re-apply(s) in all")
    assert compare_power_healer("h", {"declared_w": 420.0, "reapplies": 0}) == []
    assert compare_power_healer("h", None) == []


def test_an_open_window_marks_what_it_explains_expected_and_counts_it_not():
    journal = {"id": "w1", "state": "open", "plan": {"tenant": "hyperqwen", "resident": "strata"},
               "changed": {"tenant_started": True, "proxy_stopped": True}}
    unit = Finding("h", "unit", "llama-swap.service", "active", "inactive")
    out = apply_window("h", [unit], journal)
    assert [f.severity for f in out] == ["expected", "warn"], out
    assert drift.exit_code(out) == exitcodes.OK


@given(st.lists(st.sampled_from(sorted(SEVERITIES)), max_size=8))
def test_the_words_for_a_host_count_each_severity(sevs):
    words = severity.tally(sevs)
    if not sevs:
        assert words == "nothing found"
    for sev, word in (("drift", "difference"), ("warn", "warning")):
        n = sevs.count(sev)
        if n:
            assert re.search(rf"\b{n} {word}", words), (sevs, words)
    assert "counted" not in words
