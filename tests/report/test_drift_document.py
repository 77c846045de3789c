"""`rigkit drift --json` as a document (issue 16 item 4): findings, a status per host — clean
ones too — and the run record, read back by the report; the table shows brackets as they are."""

import io
import json

import pytest
from rich.console import Console

from rigkit.drift.compare import Finding
from rigkit.drift.run import document, dumps_document, read_document
from rigkit.cli.drift import findings_table


def test_a_clean_host_appears_with_its_status_and_exit_code():
    f = Finding("b", "pin", "nvidia-utils", "610.57-1", "610.60-1")
    text = dumps_document(document([f], {"a": 0, "b": 3}, ["a", "b"], "inv.py",
                                   {"a": {"cuda": "13.3"}, "b": None}))
    lines = [json.loads(x) for x in text.splitlines()]
    assert [r["kind"] for r in lines] == ["pin", "status", "status", "run"]
    assert {k: lines[1][k] for k in ("host", "status", "exit_code", "findings", "state")} == {
        "host": "a", "status": "clean", "exit_code": 0, "findings": 0, "state": {"cuda": "13.3"}}
    assert (lines[2]["status"], lines[2]["exit_code"], lines[2]["findings"]) == ("drift", 3, 1)
    assert (lines[3]["exit_code"], lines[3]["hosts"], lines[3]["schema_version"]) == (3, ["a", "b"], 1)
    # every line keeps the keys a reader of finding records filters on
    assert all({"kind", "host", "item", "severity"} <= set(r) for r in lines)


def test_the_report_reads_the_same_document_back():
    f = Finding("b", "power", "power limit", "420 W", "350 W")
    doc = read_document(dumps_document(document([f], {"a": 0, "b": 3}, ["a", "b"], "inv.py")))
    assert doc["run"]["exit_code"] == 3
    assert doc["hosts"]["a"]["status"] == "clean" and doc["hosts"]["a"]["records"] == []
    assert [r["item"] for r in doc["hosts"]["b"]["records"]] == ["power limit"]


def test_a_stream_without_the_run_record_is_refused_naming_the_source():
    with pytest.raises(ValueError, match=r'^old.jsonl: no "run" record \(cut short, or written by '
                                         r'an older rigkit drift --json\); run rigkit drift --json again$'):
        read_document('{"kind": "pin", "host": "a"}\n', "old.jsonl")
    with pytest.raises(ValueError, match=r"^x: line 2 is not JSON"):
        read_document('{"kind": "run"}\nnope\n', "x")


def test_square_brackets_in_the_table_are_shown_as_they_are():
    f = Finding("rig", "pin", "IgnorePkg in [options]", "[bold]nvidia-utils[/]", "missing")
    buf = io.StringIO()
    Console(file=buf, width=200, no_color=True).print(findings_table("rig", "drift", [f]))
    out = buf.getvalue()
    assert "IgnorePkg in [options]" in out and "[bold]nvidia-utils[/]" in out
