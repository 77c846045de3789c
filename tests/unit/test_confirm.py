"""The one confirmation (rigkit.host.confirm): which members it asks and in what order, its budget,
each check against a probe whose answers a test sets, and the real completion against a local HTTP
server answering as llama-swap would (200 with and without usage tokens, 5xx with the member's log)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.common.confirm import describe, member_changes, touched_members
from rigkit.host import confirm as c

IDS = st.sampled_from(["strata", "gguf-baseline", "hyperqwen", "coder", "x-1"])


def spec(members: dict, preload=("strata",), power=420):
    return {"gpu_power_limit_w": power, "llama_swap": {"preload": list(preload), "members": members}}


MEMBERS = {"strata": {"cold_boot_s": 60, "staged": False}, "gguf-baseline": {"cold_boot_s": 90, "staged": False},
           "hyperqwen": {"cold_boot_s": 180, "staged": True}}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(IDS, st.fixed_dictionaries({"cold_boot_s": st.integers(1, 900), "staged": st.booleans()})),
       st.lists(IDS), st.lists(IDS, max_size=2))
def test_asked_members_are_the_touched_live_ones_then_the_resident_once_and_never_a_staged_one(members, touched,
                                                                                               preload):
    s = spec(members, preload)
    asked = c.asked_members(s, touched)
    resident = preload[0] if preload else None
    assert len(asked) == len(set(asked))
    assert all(m in members for m in asked)
    assert all(not members[m]["staged"] for m in asked if m != resident)
    assert set(asked) - {resident} <= set(touched)
    if resident in members:
        assert asked[-1] == resident
    assert c.budget_for(s, asked) == max(c.MIN_BUDGET_S, sum(members[m]["cold_boot_s"] for m in asked) + c.MARGIN_S)


MEMBER = st.fixed_dictionaries({"v": st.integers(0, 2), "staged": st.booleans()})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(IDS, MEMBER), st.dictionaries(IDS, MEMBER))
def test_member_changes_sort_every_differing_member_into_one_kind(old, new):
    """Issue 61: each member whose definition differs is in exactly one of added/removed/changed/staged,
    by whether it is live before and after; a confirmation asks the live ones added or changed only,
    and going back asks the mirror image (removed ⇄ added)."""
    a, b = spec(old), spec(new)
    ch = member_changes(a, b)
    live_a = {m for m, v in old.items() if not v["staged"]}
    live_b = {m for m, v in new.items() if not v["staged"]}
    differ = {m for m in set(old) | set(new) if old.get(m) != new.get(m)}
    assert sorted(sum(ch.values(), [])) == sorted(differ)
    assert set(ch["added"]) == (live_b - live_a) & differ
    assert set(ch["removed"]) == (live_a - live_b) & differ
    assert set(ch["changed"]) == live_a & live_b & differ
    assert set(ch["staged"]) == differ - live_a - live_b
    assert touched_members(a, b) == sorted(set(ch["added"]) | set(ch["changed"]))
    back = member_changes(b, a)
    assert (back["added"], back["removed"], back["changed"], back["staged"]) == \
        (ch["removed"], ch["added"], ch["changed"], ch["staged"])
    assert touched_members(a, a) == [] and describe(member_changes(a, a)) == ""
    assert touched_members(None, b) == sorted(live_b)


def test_the_words_of_a_member_change():
    old = spec({"strata": {"v": 0}, "strata-8k": {"v": 0}, "hyperqwen": {"v": 0, "staged": True}})
    new = spec({"strata": {"v": 1}, "hyperqwen": {"v": 0}, "mine": {"v": 0, "staged": True}})
    assert describe(member_changes(old, new)) == "added hyperqwen; removed strata-8k; changed strata; staged mine"
    assert touched_members(old, new) == ["hyperqwen", "strata"]


class FakeProbe:
    """Answers a test sets: unit states (a list is answered in turn), the enforced limit, file
    problems, health, and each member's completion (a string, or a ConfirmError to raise)."""

    def __init__(self, units=None, enforced=420.0, problems=(), healthy=True, answers=None):
        self.units, self.enforced, self.problems, self.healthy = dict(units or {}), enforced, list(problems), healthy
        self.answers, self.asked = dict(answers or {}), []

    def unit_state(self, unit):
        v = self.units.get(unit, "active")
        if isinstance(v, list):
            return v.pop(0) if len(v) > 1 else v[0]
        return v

    def enforced_w(self, index):
        return (self.enforced, None) if self.enforced is not None else (None, "nvidia-smi: mismatch")

    def file_problems(self, files):
        return self.problems

    def health(self):
        return self.healthy

    def complete(self, member, timeout_s):
        self.asked.append((member, timeout_s))
        a = self.answers.get(member, "1 token(s) in 0.1 s")
        if isinstance(a, Exception):
            raise a
        return a


RECORD = {"n": 4, "spec": spec(MEMBERS), "units": {"enabled": ["llama-swap.service", "docker.service",
                                                               "rigkit-keeper.timer"]},
          "files": {"/etc/llama-swap/config.yaml": {"sha256": "x"}}}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def run(probe, touched=("gguf-baseline", "hyperqwen"), budget=None, record=RECORD):
    clock = Clock()
    lines: list[str] = []
    return c.confirm(record, list(touched), probe, budget, 0, lines.append, clock, clock.sleep), lines


def test_a_serving_host_is_confirmed_asking_the_touched_live_members_then_the_resident():
    probe = FakeProbe()
    result, lines = run(probe)
    assert result["confirmed"] and result["failed"] == [] and result["generation"] == 4
    assert [m for m, _ in probe.asked] == ["gguf-baseline", "strata"]  # hyperqwen is staged: never asked
    assert result["budget_s"] == 60 + 90 + c.MARGIN_S
    assert [ch["check"] for ch in result["checks"]] == ["unit llama-swap.service", "unit docker.service",
                                                        "power limit", "files", "health", "member gguf-baseline",
                                                        "member strata"]  # timers are not serving units
    assert lines[2] == "ok   power limit: enforced 420 W, declared 420 W"


@pytest.mark.parametrize("probe, failed", [
    (FakeProbe(units={"llama-swap.service": "failed"}), "unit llama-swap.service: failed"),
    (FakeProbe(enforced=350.0), "power limit: enforced 350 W, declared 420 W"),
    (FakeProbe(enforced=None), "power limit: unread (nvidia-smi: mismatch), declared 420 W"),
    (FakeProbe(problems=["/etc/llama-swap/config.yaml: content aaa, declared x"]),
     "files: /etc/llama-swap/config.yaml: content aaa, declared x"),
    (FakeProbe(answers={"strata": c.ConfirmError("strata: HTTP 502 through llama-swap after 1.0 s: upstream "
                                                 "command exited prematurely")}),
     "strata: HTTP 502 through llama-swap after 1.0 s: upstream command exited prematurely"),
])
def test_each_failed_check_is_named_and_fails_the_confirmation(probe, failed):
    result, lines = run(probe)
    assert not result["confirmed"] and result["failed"] == [failed]
    assert any(ln.startswith("FAIL ") for ln in lines)


def test_a_unit_still_activating_is_waited_for_within_the_budget():
    probe = FakeProbe(units={"llama-swap.service": ["activating", "activating", "active"]})
    result, _ = run(probe)
    assert result["confirmed"] and result["took_s"] == 1.0


def test_a_proxy_that_never_gets_healthy_fails_after_the_budget_and_asks_no_member():
    probe = FakeProbe(healthy=False)
    result, _ = run(probe, budget=5)
    assert not result["confirmed"] and probe.asked == []
    assert result["failed"] == ["health: llama-swap did not answer /health within 5 s"] and result["took_s"] >= 5


def test_each_completion_gets_what_is_left_of_the_budget():
    probe = FakeProbe()
    run(probe, budget=100)
    assert [t for _, t in probe.asked] == [100, 100]  # the fake clock does not move during a completion


# ------------------------------------------------------------------------------ the real completion
class Llama(BaseHTTPRequestHandler):
    """Answers ``POST /v1/chat/completions`` as ``MODE`` says; ``GET /logs/stream/<id>`` its log."""

    MODE = "ok"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((body, self.headers.get("Authorization")))
        if self.MODE == "ok":
            self._send(200, {"choices": [{"message": {"content": "p"}}], "usage": {"completion_tokens": 1}})
        elif self.MODE == "no-usage":
            self._send(200, {"choices": [{"message": {"content": ""}}]})
        else:
            self._send(502, {"error": "upstream command exited prematurely sk-secret-key"})

    def do_GET(self):
        data = b"error: invalid argument: --no-such-flag\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Llama)
    srv.seen = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


def test_a_completion_counts_tokens_from_usage_and_sends_the_key_as_a_bearer(server, monkeypatch):
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(Llama, "MODE", "ok")
    assert c.completion(base, "strata", "sk-secret-key", 10).startswith("HTTP 200, 1 token(s) in ")
    body, auth = server.seen[-1]
    assert body["model"] == "strata" and auth == "Bearer sk-secret-key"
    monkeypatch.setattr(Llama, "MODE", "no-usage")
    with pytest.raises(c.ConfirmError, match="strata: HTTP 200 through llama-swap but no completion tokens"):
        c.completion(base, "strata", None, 10)
    monkeypatch.setattr(Llama, "MODE", "fail")
    with pytest.raises(c.ConfirmError) as exc:
        c.completion(base, "strata", "sk-secret-key", 10)
    msg = str(exc.value)
    assert "HTTP 502" in msg and "its server said: error: invalid argument: --no-such-flag" in msg
    assert "sk-secret-key" not in msg and "<VLLM_API_KEY>" in msg


def test_no_answer_is_a_confirm_error_naming_the_member():
    with pytest.raises(c.ConfirmError, match=r"gguf-baseline: no answer through llama-swap within 1 s"):
        c.completion("http://127.0.0.1:9", "gguf-baseline", None, 1)


def test_file_problems_name_content_mode_owner_and_a_missing_file(tmp_path):
    import getpass
    import grp
    import hashlib
    import os

    me = f"{getpass.getuser()}:{grp.getgrgid(os.getgid()).gr_name}"
    a = tmp_path / "a"
    a.write_text("x")
    a.chmod(0o640)
    sha = hashlib.sha256(b"x").hexdigest()
    ok = {str(a): {"sha256": sha, "mode": "0640", "owner": me}}
    assert c._file_problems(ok) == []
    assert c._file_problems({str(a): {"sha256": "found", "declared_sha256": sha, "mode": "0640", "owner": me}}) == []
    bad = {str(a): {"sha256": "0" * 64, "mode": "0600", "owner": "nobody:nogroup"}, str(tmp_path / "b"): {"sha256": sha}}
    got = c._file_problems(bad)
    assert got == [f"{a}: content {sha[:12]}, declared 000000000000", f"{a}: mode 0640, declared 0600",
                   f"{a}: owner {me}, declared nobody:nogroup", f"{tmp_path / 'b'} is missing"]


def test_under_a_hold_the_held_config_is_not_compared_and_members_it_lacks_are_not_asked():
    probe = FakeProbe(problems=[])
    seen = {}

    def file_problems(files):
        seen.update(files)
        return []

    probe.file_problems = file_problems
    clock = Clock()
    lines: list[str] = []
    result = c.confirm(RECORD, ["gguf-baseline"], probe, None, 0, lines.append, clock, clock.sleep,
                       live_members={"strata"}, held={"/etc/llama-swap/config.yaml": "held since T by `x`"})
    assert result["confirmed"] and result["members"] == ["strata"] and [m for m, _ in probe.asked] == ["strata"]
    assert seen == {}  # the only declared file is the held live config
    assert "note /etc/llama-swap/config.yaml: not compared (held since T by `x`)" in lines
    assert "note gguf-baseline: not in the live llama-swap config (a hold keeps it): not asked" in lines
