"""``rigkit drift``'s plain output (for a terminal and for cron alike) and the deploy's own output:
drift's table fits the width it is given (the terminal, ``$COLUMNS``, 80 for a pipe) and ends with the
complete command that repairs what it counted; a deploy lists only the operations that changed
something (``-v`` all); ``deploy --dry`` ends with rigkit's summary of pyinfra's plan."""

from __future__ import annotations

import io
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from rigkit.cli.deployout import QuietLog, plan_summary, print_plan
from rigkit.cli.drift import findings_table, plain_console, repair_hint
from rigkit.drift.compare import Finding
from rigkit.drift.severity import KINDS

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Co", "Cn", "Zl", "Zp", "Mn", "Me", "Cf")),
               max_size=300)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(KINDS)), TEXT, TEXT, TEXT), min_size=1, max_size=5),
       st.sampled_from([80, 100, 132]))
def test_the_table_fits_the_width_it_is_given(rows, width):
    """Whatever the findings say (long paths, long sentences, wide characters), no line of the table
    is wider than the console: 80 columns in a pipe, the terminal's width otherwise."""
    findings = [Finding("demo", kind, item, declared, actual) for kind, item, declared, actual in rows]
    buf = io.StringIO()
    Console(file=buf, width=width, no_color=True, highlight=False, soft_wrap=False).print(
        findings_table("demo", "drift", findings, width=width))
    from rich.cells import cell_len

    assert max(cell_len(line) for line in buf.getvalue().splitlines()) <= width


def test_a_pipe_gets_80_columns_and_columns_is_honoured():
    code = "from rigkit.cli.drift import plain_console; c = plain_console(); print(c.width, c.is_terminal)"
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin"}, check=True)
    assert piped.stdout.split() == ["80", "False"]
    wide = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "120"}, check=True)
    assert wide.stdout.split() == ["120", "False"]


def test_the_repair_line_is_the_deploy_for_that_host_with_reboot_when_pending(monkeypatch):
    monkeypatch.setenv("RIGKIT_INVENTORY", "inventory/sandbox.py")
    unit = Finding("demo", "unit", "llama-swap.service", "enabled", "disabled")
    assert repair_hint("demo", [unit]) == "rigkit deploy -i inventory/sandbox.py --host demo"
    reboot = Finding("demo", "reboot", "kernel", "booted", "pending")
    assert repair_hint("demo", [unit, reboot]) == "rigkit deploy -i inventory/sandbox.py --host demo --reboot"
    # warnings and what could not be checked are not repaired by a deploy: no line
    assert repair_hint("demo", [Finding("demo", "hold", "llama-swap", "d", "a")]) is None
    assert repair_hint("demo", [Finding("demo", "host", "connection", "d", "a")]) is None


# pyinfra 3.10's log of a converged run, as `rigkit deploy` relays it (the before of issue 40: 205 lines)
LOG = """--> Loading config...
    [demo] Connected

--> Beginning operation run...
--> Starting operation: Pins | Hold the pinned packages with IgnorePkg in [options] 
    [demo] No changes

--> Starting operation: Docker | Merge the nvidia runtime and the cgroup mitigation into daemon.json 
    [demo] Success

--> Starting operation: llama-swap | Activate the declared live llama-swap config (on the host) 
    [demo] noop: llama-swap's live config is held (/var/lib/rigkit/holds.json); not activating
    [demo] No changes

--> Starting operation: Generation | Record the generation this deploy leaves 
    [demo] No changes

--> Results:
    [demo] hold: release with `rigkit wire-in --release`
"""


def relayed(log_text: str, verbose: bool = False) -> str:
    """What the deploy relays of pyinfra's log ``log_text``, written line by line as pyinfra writes it."""
    out = io.StringIO()
    log = QuietLog(out, verbose=verbose)
    for line in log_text.splitlines(keepends=True):
        log.write(line)
    log.close()
    return out.getvalue()


def test_a_deploy_lists_what_changed_and_counts_the_rest():
    text = relayed(LOG)
    assert "Hold the pinned packages" not in text and "Record the generation" not in text
    assert "Merge the nvidia runtime" in text and "[demo] Success" in text
    assert "noop: llama-swap's live config is held" in text  # a block that says something is kept
    assert "    (2 operation(s) with no changes not listed; -v lists them)\n" in text
    assert "`rigkit wire-in -i" in text and "--host demo --release`" in text  # the host's hint, completed
    verbose = relayed(LOG, verbose=True)
    assert "Hold the pinned packages" in verbose and "not listed" not in verbose


def _op(name, change=(), cond=()):
    return {"names": [name], "hosts_with_change": list(change), "hosts_with_conditional_change": list(cond)}


def test_a_dry_run_ends_with_rigkits_summary_and_explains_the_conditional_rows(capsys):
    plan = {"plan": [_op("Pins | Install"), _op("Docker | Merge daemon.json", change=["a"]),
                     _op("Docker | Restart docker for the new daemon.json", cond=["a", "b"]),
                     _op("Generation | Record the generation this deploy leaves", change=["a", "b"])],
            "results": None}
    summary = plan_summary(plan, ["a", "b"])
    assert summary["a"]["change"] == ["Docker | Merge daemon.json"]
    assert summary["b"] == {"change": [], "conditional": ["Docker | Restart docker for the new daemon.json"],
                            "total": [op["names"][0] for op in plan["plan"]],
                            "record": ["Generation | Record the generation this deploy leaves"]}
    import json

    print_plan(json.dumps(plan), ["a", "b"])
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "a: the deploy would change 1 of 4 operations:",
        "  change       Docker | Merge daemon.json",
        "  conditional  Docker | Restart docker for the new daemon.json — runs only if an operation before it changes "
        "something",
        "b: the deploy would change nothing on the rig (4 operations checked); it would only record a new "
        "generation, whose declared state differs from the current one's as the generation line above says; "
        "1 conditional operation(s) — each runs only after an operation before it changes something — would not run",
    ]
    # the operator's report: "would change nothing" right under "generation 1 … is replaced by generation 2";
    # a plan that records no generation (converged) says "would change nothing" alone
    plan["plan"][-1]["hosts_with_change"] = ["a"]
    print_plan(json.dumps(plan), ["a", "b"])
    assert capsys.readouterr().out.splitlines()[-1] == (
        "b: the deploy would change nothing (4 operations checked); 1 conditional operation(s) — each runs only "
        "after an operation before it changes something — would not run")


# what a finding's values may hold: the TEXT above plus line breaks and the shapes that folded mid-word
# before (a path, a digest, a hold's long sentence)
VALUE = st.one_of(TEXT, st.text(alphabet=st.sampled_from("ab/.-_:\n\r é漢"), max_size=120),
                  st.sampled_from(["/opt/rigkit/hyperqwen/.env", "sha256:" + "0123456789abcdef" * 4,
                                   "held by a rollback (generation 3): the deploy leaves it; release with "
                                   "`rigkit rollback -i inventory/sandbox.py --host demo --release`"]))


def _drift_in_a_pipe(monkeypatch, findings, width):
    """``rigkit drift``'s own command, its output a pipe (click's runner), ``$COLUMNS`` = ``width``, over
    ``findings`` (the probe stood in: only the output is under test)."""
    from types import SimpleNamespace

    from click.testing import CliRunner

    import rigkit.cli.drift as cli_drift
    import rigkit.drift as drift_pkg
    from rigkit.drift.run import exit_code

    monkeypatch.setattr(cli_drift, "load_or_exit", lambda inv, hosts: [SimpleNamespace(name="demo")])
    monkeypatch.setattr(drift_pkg, "check", lambda *a, **k: (findings, {"demo": exit_code(findings)}))
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("RIGKIT_INVENTORY", "inventory/sandbox.py")
    return CliRunner().invoke(cli_drift.drift, [], catch_exceptions=False).output


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(set(KINDS) - {"host"})), VALUE, VALUE, VALUE), min_size=1, max_size=6),
       st.sampled_from([20, 40, 80, 132]))
def test_in_a_pipe_each_finding_is_one_line_with_every_value_whole(rows, width):
    """Issue 61: in a pipe, paths and digests were folded mid-word (``/opt/rigkit/hype`` / ``rqwen/.env``)
    and a hold row took 13 lines. Now, whatever the values and whatever ``$COLUMNS``: after the host's
    verdict and the header, exactly one line per finding, in order, holding each of its values whole
    (a line break in a value written ``\\n``), columns aligned."""
    import pytest

    findings = [Finding("demo", kind, item, declared, actual) for kind, item, declared, actual in rows]
    with pytest.MonkeyPatch.context() as mp:
        text = _drift_in_a_pipe(mp, findings, width)
    lines = text.splitlines()
    assert lines[0].startswith("demo: ") and lines[1].split() == ["kind", "item", "declared", "actual", "severity"]
    body = lines[2:2 + len(findings)]
    assert len(body) == len(findings)
    assert all("\x1b" not in line for line in lines)  # no colour in a pipe
    for f, line in zip(findings, body):
        at = 0
        for value in (f.kind, f.item, f.declared, f.actual, f.severity):
            shown = value.replace("\r", "\\r").replace("\n", "\\n")
            at = line.find(shown, at)
            assert at >= 0, (shown, line)
            at += len(shown)
    # what follows is the repair line or nothing: no finding spilled onto another line
    assert all(line.startswith("demo: to repair: ") for line in lines[2 + len(findings):])


def test_an_unreachable_host_reads_as_such(monkeypatch):
    """Issue 61: ``demo: not checked (1 not checked)`` and a folded table became one line naming what
    happened, in a pipe and in the ``--json`` run's stderr word alike."""
    lost = [Finding("demo", "host", "connection", "reachable, probed",
                    "unreachable: Could not resolve hostname ([Errno -2] Name or service not known)")]
    text = _drift_in_a_pipe(monkeypatch, lost, 80)
    assert text == ("demo: unreachable: Could not resolve hostname ([Errno -2] Name or service not known); "
                    "nothing checked\n")
    from rigkit.cli.drift import verdict

    assert verdict(1, [Finding("demo", "plan-failed", "pyinfra --dry --json", "a plan", "boom"),
                       Finding("demo", "unit", "x.service", "enabled", "disabled")]) \
        == "incomplete (1 difference, 1 check failed)"


def test_a_dry_run_says_of_each_conditional_row_whether_it_runs_in_this_plan(capsys):
    """Issue 61: ``deploy --dry`` listed conditional rows ("runs only if an operation before it changes
    something") where one before it does change, without saying whether they would run. With what the
    deploy file found (rigkit.deploy.planned), each row says it; one that runs counts as a change, and a
    host where only a conditional would run (the agent's venv missing) is not "would change nothing"."""
    import json

    plan = {"plan": [_op("Docker | Merge daemon.json", change=["a"]),
                     _op("Docker | Restart docker for the new daemon.json", cond=["a", "b"]),
                     _op("llama-swap | Reload systemd for llama-swap.service", cond=["a", "b"]),
                     _op("Agent | Create the agent venv", cond=["b"])],
            "results": None}
    runs = {"a": {"Docker | Restart docker for the new daemon.json": True,
                  "llama-swap | Reload systemd for llama-swap.service": False},
            "b": {"Docker | Restart docker for the new daemon.json": False,
                  "llama-swap | Reload systemd for llama-swap.service": False, "Agent | Create the agent venv": True}}
    print_plan(json.dumps(plan), ["a", "b"], runs)
    assert capsys.readouterr().out.splitlines() == [
        "a: the deploy would change 2 of 4 operations:",
        "  change       Docker | Merge daemon.json",
        "  conditional  Docker | Restart docker for the new daemon.json — will run: what it waits on changes in this plan",
        "  conditional  llama-swap | Reload systemd for llama-swap.service — will not run: nothing it waits on changes "
        "in this plan",
        "b: the deploy would change 1 of 4 operations:",
        "  conditional  Docker | Restart docker for the new daemon.json — will not run: nothing it waits on changes in "
        "this plan",
        "  conditional  llama-swap | Reload systemd for llama-swap.service — will not run: nothing it waits on changes "
        "in this plan",
        "  conditional  Agent | Create the agent venv — will run: what it waits on changes in this plan",
    ]


# pyinfra 3.10's log of a failed activation as `rigkit deploy` relayed it (the operator's report): the
# agent's log printed whole by pyinfra (print_host_combined_output), then its "executed 0 commands"
FAILED_LOG = """--> Starting operation: llama-swap | Activate the declared live llama-swap config (on the host) 
    [demo] [10:01:02] installed the new config as /etc/llama-swap/config.yaml (0059c69b5191)
    [demo] [10:01:09] FAILED: strata did not answer through llama-swap: HTTP 502
    [demo] [10:01:10] restored the previous config from /etc/llama-swap/config.yaml.bak-20261206T100102Z
    [demo] Error: executed 0 commands

"""


def test_a_failed_activation_says_its_reason_once_and_not_pyinfras_executed_0_commands(monkeypatch):
    """The operator's report: a failed activation printed pyinfra's ``Error: executed 0 commands`` and its
    reason twice (pyinfra prints a failed command's output whole; the activation's surfaced lines
    repeated it). The relayed log leaves pyinfra's line out (``-v`` keeps it); the activation command
    surfaces its lines only when it succeeded."""
    text = relayed(FAILED_LOG)
    assert "executed 0 commands" not in text and text.count("FAILED: strata did not answer") == 1, text
    verbose = relayed(FAILED_LOG, verbose=True)
    assert "Error: executed 0 commands" in verbose

    from pyinfra.api import StringCommand
    from pyinfra.connectors.util import CommandOutput, OutputLine

    from rigkit.operations import llama_swap as op

    said: list[str] = []
    monkeypatch.setattr(op.logger, "warning", said.append)
    lines = CommandOutput([OutputLine("stdout", "[10:01:09] FAILED: strata did not answer through llama-swap"),
                           OutputLine("stdout", "[10:01:10] restored the previous config from X")])
    host = type("H", (), {"print_prefix": "[demo] "})()
    for status, expected in ((False, 0), (True, 2)):
        said.clear()
        monkeypatch.setattr(StringCommand, "execute", lambda self, *a, s=status: (s, lines))
        assert op.AgentCommand("true").execute(None, host, {}) == (status, lines)
        assert len(said) == expected, said  # pyinfra prints a failed command's output itself
