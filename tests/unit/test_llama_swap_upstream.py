"""What the real llama-swap 250 does with the members rigkit gives it, shown with the fake model
server ``data/llama_swap/fake_member.py`` (failure injection stays in the model server). Ported from
the retired stand-in's behaviour tests (issue #23, step 3); each expectation cites upstream v250.

No test here depends on this machine's speed: what a test needs to happen "meanwhile" (a member still
loading, a stream mid-way, a keep-alive running out) the fake member does at the test's word, and the
test waits for the state it needs (``/running``, the requests in flight, the log) before it goes on."""

from __future__ import annotations

import http.client
import json
import sys
import signal
import threading
import time

import pytest

from .llama_swap_live import (FAKE_MEMBER, HANG_S, chat, free_port, free_port_pair, member_cmd, port_open,
                              request, vram_mib)

pytestmark = pytest.mark.slow


def test_preload_at_start_then_running_health_and_version(run_llama_swap, gpu_dir):
    pa, pb = free_port(), free_port()
    ls = run_llama_swap(f"""
models:
  strata:
    cmd: {member_cmd(pa, "strata", "--vram-mib", "21000")}
    proxy: http://127.0.0.1:{pa}
    name: Strata
    ttl: 0
  baseline:
    cmd: {member_cmd(pb, "baseline")}
    proxy: http://127.0.0.1:{pb}
routing:
  router:
    settings:
      groups:
        gpu:
          swap: true
          exclusive: true
          members: [strata, baseline]
hooks:
  on_startup:
    preload: [strata]
""")
    ls.wait_running({"strata": "ready"})
    assert vram_mib(gpu_dir) == 21000
    entry = ls.running_entries()["strata"]  # api.go:312-352
    assert entry["proxy"] == "http://127.0.0.1:%d" % pa and entry["ttl"] == 0
    assert entry["name"] == "Strata" and entry["cmd"].endswith("--vram-mib 21000")
    assert ls.get("/health")[:2] == (200, b"OK")  # api.go:417-420
    version = json.loads(ls.get("/api/version")[1])
    assert version == {"version": "250", "commit": "60226b63776e", "build_date": "2026-08-14T15:45:40Z"}
    assert sorted(m["id"] for m in json.loads(ls.get("/v1/models")[1])["data"]) == ["baseline", "strata"]
    assert "preloading model: strata" in ls.output()  # server/api.go startPreload


def test_health_is_200_ok_whatever_the_models_do(run_llama_swap):
    # handleHealth writes 200 "OK" unconditionally (api.go:417-420): it says llama-swap is up,
    # nothing about its members; a member that cannot start does not change it.
    p = free_port()
    ls = run_llama_swap(f"""
models:
  crash:
    cmd: {member_cmd(p, "crash", "--exit-at-start", "1")}
    proxy: http://127.0.0.1:{p}
hooks:
  on_startup:
    preload: [crash]
""")
    ls.wait_output("failed to preload model crash")
    assert ls.running() == {}
    assert ls.get("/health")[:2] == (200, b"OK")


def test_completion_and_stream_pass_through_with_use_model_name(run_llama_swap, tmp_path):
    p = free_port()
    go = tmp_path / "go"
    ls = run_llama_swap(f"""
startPort: {p}
models:
  tiny:
    cmd: {member_cmd("${PORT}", "tiny", "--tokens", "4", "--hold-file", str(go))}
    useModelName: served-name
    aliases: [tiny-alias]
""")
    st, body, _ = chat(ls.port, "tiny-alias")
    assert st == 200, body
    reply = json.loads(body)
    assert reply["model"] == "served-name" and reply["usage"]["completion_tokens"] == 4
    st, body, _ = request(ls.port, "POST", "/v1/completions", {"model": "tiny", "prompt": "x"})
    assert st == 200 and json.loads(body)["object"] == "text_completion"

    # stream: chunks arrive one by one, not buffered until the end: the first arrives while the member
    # holds the rest (until the test creates `go`)
    conn = http.client.HTTPConnection("127.0.0.1", ls.port, timeout=HANG_S)
    conn.request("POST", "/v1/chat/completions", json.dumps(
        {"model": "tiny", "stream": True, "stream_options": {"include_usage": True}, "messages": []}),
        {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    assert r.getheader("X-Accel-Buffering") == "no"  # process_command.go:434-439
    first = r.readline()
    assert first.startswith(b"data: ") and not go.exists()
    go.touch()
    rest = r.read()
    conn.close()
    events = [json.loads(line[6:]) for line in (first + rest).split(b"\n") if line.startswith(b"data: {")]
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"]) == "w0 w1 w2 w3 "
    assert all(e["model"] == "served-name" for e in events)
    assert events[-1]["usage"]["completion_tokens"] == 4 and rest.rstrip().endswith(b"data: [DONE]")
    st, body, _ = chat(ls.port, "nope")  # swaputil/http.go:100-101, :124-131
    assert st == 404 and json.loads(body) == {"src": "llama-swap", "error": "no router for requested model"}


def test_swap_in_exclusive_group_stops_other_member_and_frees_vram_first(run_llama_swap, gpu_dir, tmp_path):
    pa, pb = free_port(), free_port()
    seen = tmp_path / "b-saw-vram"
    ls = run_llama_swap(f"""
models:
  a:
    cmd: {member_cmd(pa, "a", "--vram-mib", "20000")}
    proxy: http://127.0.0.1:{pa}
  b:
    cmd: {member_cmd(pb, "b", "--vram-mib", "19000", "--vram-seen-file", str(seen))}
    proxy: http://127.0.0.1:{pb}
routing:
  router:
    settings:
      groups:
        gpu: {{swap: true, exclusive: true, members: [a, b]}}
hooks:
  on_startup:
    preload: [a]
""")
    ls.wait_running({"a": "ready"})
    assert vram_mib(gpu_dir) == 20000
    st, body, _ = chat(ls.port, "b")
    assert st == 200 and json.loads(body)["served_by"] == "b"
    assert ls.running() == {"b": "ready"}
    assert seen.read_text().strip() == "0"  # a had stopped before b started (base.go doSwap: wg.Wait())
    assert vram_mib(gpu_dir) == 19000 and not port_open(pa)


def test_member_whose_cmd_exits_fails_its_start_at_once(run_llama_swap):
    # The start fails on the exit (process_command.go:530-531, the health loop's cmdDone), not at
    # healthCheckTimeout (:535-536, "health check timed out after 2m0s"): the answer says which.
    p1, p2 = free_port(), free_port()
    ls = run_llama_swap(f"""
healthCheckTimeout: 120
models:
  crash:
    cmd: {member_cmd(p1, "crash", "--exit-at-start", "1")}
    proxy: http://127.0.0.1:{p1}
  dies-while-loading:
    cmd: {member_cmd(p2, "dies", "--never-healthy", "--die-after", "0.6")}
    proxy: http://127.0.0.1:{p2}
""")
    for model in ("crash", "dies-while-loading"):
        st, body, _ = chat(ls.port, model)
        assert st == 500, body  # process_command.go:504-507, :530-531
        assert json.loads(body) == {"src": "llama-swap", "error": "unspecific error: upstream command exited prematurely"}
    assert ls.running() == {}


def test_ttl_unloads_idle_member(run_llama_swap, gpu_dir):
    p = free_port()
    ls = run_llama_swap(f"""
models:
  brief:
    cmd: {member_cmd(p, "brief", "--vram-mib", "500")}
    proxy: http://127.0.0.1:{p}
    ttl: 1
""")
    assert chat(ls.port, "brief")[0] == 200
    assert vram_mib(gpu_dir) == 500
    ls.wait_running({})  # the TTL ticker checks every second (process_command.go:306-324)
    assert vram_mib(gpu_dir) == 0 and not port_open(p)
    assert "<brief> Unloading model, TTL of 1s reached" in ls.output()


def test_unload_frees_member_port_and_vram(run_llama_swap, gpu_dir, tmp_path):
    pa, pb, pc = free_port(), free_port(), free_port()
    sig = tmp_path / "b-signals"
    ls = run_llama_swap(f"""
models:
  a:
    cmd: {member_cmd(pa, "a", "--vram-mib", "1000")}
    proxy: http://127.0.0.1:{pa}
  b:
    cmd: {member_cmd(pb, "b", "--vram-mib", "2000", "--signal-log", str(sig))}
    cmdStop: kill -INT ${{PID}}
    proxy: http://127.0.0.1:{pb}
  stubborn:
    cmd: {member_cmd(pc, "stubborn", "--vram-mib", "4000", "--ignore-sigterm")}
    proxy: http://127.0.0.1:{pc}
    unloadTimeout: 1
groups:
  all: {{swap: false, exclusive: true, members: [a, b, stubborn]}}
""")
    for m in ("a", "b", "stubborn"):
        assert chat(ls.port, m)[0] == 200
    assert vram_mib(gpu_dir) == 7000

    assert ls.post("/api/models/unload/a")[:2] == (200, b"OK")  # apigroup.go:145-159
    assert not port_open(pa) and vram_mib(gpu_dir) == 6000
    assert ls.running() == {"b": "ready", "stubborn": "ready"}

    assert ls.post("/api/models/unload/b")[:2] == (200, b"OK")  # through cmdStop, not SIGTERM
    assert sig.read_text() == "SIGINT\n" and not port_open(pb)

    t0 = time.monotonic()
    st, body, _ = ls.post("/api/models/unload")  # SIGTERM ignored: SIGKILL after unloadTimeout
    # a lower bound only: it waited out the unloadTimeout, however fast the machine
    assert (st, json.loads(body)) == (200, {"msg": "ok"}) and time.monotonic() - t0 >= 1.0
    assert ls.running() == {} and vram_mib(gpu_dir) == 0 and not port_open(pc)
    st, body, _ = ls.post("/api/models/unload/ghost")
    assert st == 404 and json.loads(body) == {"src": "llama-swap", "error": "model not found"}
    assert chat(ls.port, "a")[0] == 200
    assert ls.get("/unload")[:2] == (200, b"OK") and ls.running() == {}


def test_requests_queue_while_member_starts_and_share_one_start(run_llama_swap, tmp_path):
    p = free_port()
    ready = tmp_path / "ready"
    ls = run_llama_swap(f"""
models:
  slow:
    cmd: {member_cmd(p, "slow", "--ready-file", str(ready))}
    proxy: http://127.0.0.1:{p}
""")
    results = []
    threads = [threading.Thread(target=lambda: results.append(chat(ls.port, "slow")[0])) for _ in range(3)]
    for t in threads:
        t.start()
    ls.wait_inflight("slow", 3)  # all three wait in llama-swap while the member loads (until `ready`)
    ls.wait_running({"slow": "starting"})
    assert results == []
    ready.touch()
    for t in threads:
        t.join(HANG_S)
    assert results == [200, 200, 200]
    assert ls.output().count("<slow> Health check passed") == 1


def test_busy_member_is_not_evicted_mid_request(run_llama_swap, tmp_path):
    pa, pb = free_port(), free_port()
    go = tmp_path / "go"
    ls = run_llama_swap(f"""
models:
  a:
    cmd: {member_cmd(pa, "a", "--tokens", "8", "--hold-file", str(go))}
    proxy: http://127.0.0.1:{pa}
  b:
    cmd: {member_cmd(pb, "b")}
    proxy: http://127.0.0.1:{pb}
""")
    assert chat(ls.port, "a")[0] == 200
    conn = http.client.HTTPConnection("127.0.0.1", ls.port, timeout=HANG_S)
    conn.request("POST", "/v1/chat/completions", json.dumps({"model": "a", "stream": True, "messages": []}),
                 {"Content-Type": "application/json"})
    ra = conn.getresponse()
    first = ra.readline()  # a is mid-stream: its member holds the rest until `go`
    assert ra.status == 200 and first.startswith(b"data: ")
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("b", chat(ls.port, "b")))
    t.start()
    ls.wait_inflight("b", 1)  # b's request has come, and waits
    assert ls.running() == {"a": "ready"} and done == {}  # a is busy: not evicted for b
    go.touch()
    a_body = first + ra.read()
    conn.close()
    t.join(HANG_S)
    st, body, _ = done["b"]
    assert a_body.rstrip().endswith(b"data: [DONE]") and a_body.count(b'"content"') == 8  # a's stream whole
    assert st == 200 and json.loads(body)["served_by"] == "b"
    assert ls.running() == {"b": "ready"}


def test_sigterm_stops_every_member_and_exits_0(run_llama_swap, gpu_dir):
    pa, pb = free_port(), free_port()
    ls = run_llama_swap(f"""
models:
  a:
    cmd: {member_cmd(pa, "a", "--vram-mib", "100")}
    proxy: http://127.0.0.1:{pa}
  b:
    cmd: {member_cmd(pb, "b", "--vram-mib", "200")}
    proxy: http://127.0.0.1:{pb}
groups:
  both: {{swap: false, members: [a, b]}}
hooks:
  on_startup:
    preload: [a, b]
""")
    ls.wait_running({"a": "ready", "b": "ready"})
    assert vram_mib(gpu_dir) == 300
    assert ls.stop() == 0  # llama-swap.go:349-406
    assert vram_mib(gpu_dir) == 0 and not port_open(pa) and not port_open(pb)
    out = ls.output()
    assert "received signal terminated, shutting down" in out and out.rstrip().endswith("shutdown complete")


def test_config_dir_fragments_merge_in_filename_order(run_llama_swap, llama_swap_bin, tmp_path):
    from .llama_swap_live import logged_error, run_config

    pa, pb = free_port(), free_port()
    d = tmp_path / "conf.d"
    d.mkdir()
    (d / "20-b.yaml").write_text(f"models:\n  b:\n    cmd: {member_cmd(pb, 'b')}\n    proxy: http://127.0.0.1:{pb}\n"
                                 "hooks:\n  on_startup:\n    preload: [b]\n")
    (d / "10-a.yml").write_text(f"models:\n  a:\n    cmd: {member_cmd(pa, 'a')}\n    proxy: http://127.0.0.1:{pa}\n")
    (d / "notes.txt").write_text("not yaml: ignored\n")
    main = "healthCheckTimeout: 30\ngroups:\n  both: {swap: false, members: [a, b]}\n" \
           "hooks:\n  on_startup:\n    preload: [a]\n"
    ls = run_llama_swap(main, args=["-config-dir", str(d)])  # merge.go:33-101
    ls.wait_running({"a": "ready", "b": "ready"})  # the preload lists were appended: [a, b]
    assert sorted(m["id"] for m in json.loads(ls.get("/v1/models")[1])["data"]) == ["a", "b"]
    ls.stop()
    (d / "30-dup.yaml").write_text(f"models:\n  a:\n    cmd: {member_cmd(pa, 'other')}\n")
    r = run_config(llama_swap_bin, ls.config, extra=["-config-dir", str(d)])
    assert r.returncode == 1  # merge.go:218-229
    assert logged_error(r.stderr) == f'duplicate models "a" found in {d}/30-dup.yaml (already defined in another config source)'


def test_member_exiting_after_ready_is_marked_stopped_and_restarted_by_next_request(run_llama_swap):
    p = free_port()
    ls = run_llama_swap(f"""
models:
  flaky:
    cmd: {member_cmd(p, "flaky", "--die-after-answers", "1")}
    proxy: http://127.0.0.1:{p}
""")
    assert chat(ls.port, "flaky")[0] == 200
    ls.wait_running({})
    assert "<flaky> upstream process exited unexpectedly" in ls.output()  # process_command.go:210-225
    assert chat(ls.port, "flaky")[0] == 200  # no negative caching: the next request restarts it


def _reload_config(pa, pb):
    return (f"models:\n  a:\n    cmd: {member_cmd(pa, 'a')}\n    proxy: http://127.0.0.1:{pa}\n",
            f"models:\n  b:\n    cmd: {member_cmd(pb, 'b')}\n    proxy: http://127.0.0.1:{pb}\n"
            "hooks:\n  on_startup:\n    preload: [b]\n")


def test_sighup_reloads_config_stops_the_running_members_and_preloads_again(run_llama_swap):
    pa, pb = free_port(), free_port()
    first, second = _reload_config(pa, pb)
    ls = run_llama_swap(first + "hooks:\n  on_startup:\n    preload: [a]\n")
    ls.wait_running({"a": "ready"})
    with open(ls.config, "w") as f:
        f.write(second)
    ls.proc.send_signal(signal.SIGHUP)  # llama-swap.go:346-348 -> reload :202-278
    ls.wait_running({"b": "ready"})  # the new server's New() runs startPreload (server.go)
    assert not port_open(pa)  # old.Shutdown stopped a (llama-swap.go:263)
    assert [m["id"] for m in json.loads(ls.get("/v1/models")[1])["data"]] == ["b"]
    with open(ls.config, "w") as f:
        f.write("startPort: 0\nmodels: {}\n")
    ls.proc.send_signal(signal.SIGHUP)  # an invalid config is logged and the old one kept (:218-222)
    ls.wait_output("failed to reload config: startPort must be greater than 1")
    assert ls.running() == {"b": "ready"}
    # unchanged config: SIGHUP still rebuilds the server, so the running member is stopped and
    # (being in preload) started again
    with open(ls.config, "w") as f:
        f.write(second)
    before = ls.output().count("<b> Health check passed")
    ls.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + HANG_S
    while ls.output().count("<b> Health check passed") == before:
        assert time.monotonic() < deadline, ls.output()
        time.sleep(0.05)
    ls.wait_running({"b": "ready"})


def test_watch_config_reloads_on_change(run_llama_swap):
    pa, pb = free_port(), free_port()
    first, second = _reload_config(pa, pb)
    ls = run_llama_swap(first, args=["-watch-config"])  # poll-based, 2 s (llama-swap.go:283-299)
    assert chat(ls.port, "a")[0] == 200
    with open(ls.config, "w") as f:
        f.write(second)
    ls.wait_running({"b": "ready"})
    assert not port_open(pa)
    assert "configuration reloaded" in ls.output()


def test_silent_rewrites_and_ignored_keys(run_llama_swap):
    p = free_port_pair()
    ls = run_llama_swap(f"""
healthCheckTimeout: 5          # clamped to 15 (load.go:63-65)
logLevel: chatty               # behaves as info (llama-swap.go:112-121)
unloadTimeout: 0               # -> 10 (load.go:86-88)
globalTTL: 30
startPort: {p}
timeout: 99                    # unknown top-level keys are ignored (yaml.v3 without KnownFields)
groups:
  g:
    preload: [b]               # unknown group key ignored (#1013)
    members: [b, c]
models:
  c:
    cmd: {member_cmd("${PORT}", "${MODEL_ID}")}
    ttl: -1                    # -> globalTTL (load.go:139-141)
    cmd_stop: ignored          # unknown model key ignored
  b:
    cmd: |
      # a comment line
      {member_cmd("${PORT}", '"two words"')} \\
        --tokens 2
    ttl: 0
  fixed:
    cmd: {member_cmd(free_port(), "fixed")}
    proxy: http://127.0.0.1:9
hooks:
  on_startup:
    preload: [ghost, " b "]    # unknown ids dropped, ids trimmed (load.go:270-283)
""")
    ls.wait_running({"b": "ready"})
    b = ls.running_entries()["b"]
    # ${PORT} from startPort in sorted model-ID order, only for models using it: b, c; not fixed
    assert b["proxy"] == "http://localhost:%d" % p and b["ttl"] == 0
    st, body, _ = chat(ls.port, "b")
    assert st == 200 and json.loads(body)["served_by"] == "two words"  # comment dropped, quotes kept
    assert json.loads(body)["usage"]["completion_tokens"] == 2  # the backslash continuation joined
    assert chat(ls.port, "c")[0] == 200
    assert ls.running() == {"c": "ready"}  # group g swaps (default swap: true)
    c = ls.running_entries()["c"]
    assert c["ttl"] == 30 and c["proxy"] == "http://localhost:%d" % (p + 1)
    assert c["cmd"] == member_cmd(p + 1, "c")


def test_proxy_reuses_idle_connections_and_never_retries_a_post(run_llama_swap, tmp_path):
    # The member's reverse proxy keeps idle connections (http.Transport, MaxIdleConnsPerHost 10,
    # IdleConnTimeout timeouts.idleConn = 90 s; process_command.go:419-433); the health check goes
    # through the same proxy (:539-541), so its connection is the one the first request reuses.
    # A member that closes a reused connection without answering: net/http retries only replayable
    # requests (GET), so a POST gets Go's ReverseProxy default error: a 502 with an empty body and
    # "http: proxy error: EOF" in llama-swap's log (no ErrorHandler is set for members).
    p = free_port()
    drops = tmp_path / "drops"
    ls = run_llama_swap(f"""
models:
  m:
    cmd: {member_cmd(p, "m", "--drop-reused", "--drop-log", str(drops))}
    proxy: http://127.0.0.1:{p}
""")
    st, body, _ = chat(ls.port, "m")  # starts m; the POST reuses the health check's connection
    assert (st, body) == (502, b""), body
    ls.wait_output("http: proxy error: EOF")
    assert drops.read_text() == "POST /v1/chat/completions\n"
    assert request(ls.port, "GET", "/upstream/m/v1/models")[0] == 200  # a fresh connection
    st, body, _ = request(ls.port, "GET", "/upstream/m/v1/models")  # reuses it: dropped, then retried
    assert st == 200 and json.loads(body)["data"][0]["id"] == "m"
    assert drops.read_text() == "POST /v1/chat/completions\nGET /v1/models\n"


@pytest.mark.parametrize("idle_conn", [None, 2], ids=["upstream-default-90s", "rigkit-2s"])
def test_idle_conn_below_the_members_keep_alive_means_a_post_after_idle_never_meets_a_closing_connection(
        run_llama_swap, tmp_path, idle_conn):
    # Issue #25's cause and fix. llama.cpp's server closes a keep-alive connection 5 s after its last answer
    # (cpp-httplib's CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND; it says "Keep-Alive: timeout=5", which Go ignores).
    # llama-swap keeps idle connections for timeouts.idleConn s (default 90, model_config.go:141-147): net/http's
    # transport.go tryPutIdleConn arms `time.AfterFunc(t.IdleConnTimeout, pconn.closeConnIfStillIdle)` when it puts a
    # connection back idle, and hands an idle one to the next request until then. A POST that meets the member
    # closing it is not retried (transport.go shouldRetryRequest: a body without GetBody is not replayable): 502,
    # empty body. With idleConn below the member's keep-alive (rigkit renders 2), llama-swap has closed its idle
    # connection before the member would: the next POST dials a fresh one.
    # No clock here: the member's keep-alive runs out when the test says so (`keepalive`: every connection idle
    # then is one it is closing), and with idleConn the test waits for the event itself — the member sees every
    # connection it served closed by llama-swap (`conns`, a bounded poll; the bound only guards a hang). Sleeping
    # idleConn + a margin instead assumed llama-swap's readLoop put the connection back within that margin of the
    # answer reaching the test: on a busy machine it did not, and the POST met the closing connection.
    p = free_port()
    drops, word, conns = tmp_path / "drops", tmp_path / "keepalive", tmp_path / "conns"
    timeouts = f"    timeouts:\n      idleConn: {idle_conn}\n" if idle_conn else ""
    ls = run_llama_swap(f"""
models:
  m:
    cmd: {member_cmd(p, "m", "--keepalive-file", str(word), "--drop-log", str(drops), "--conn-log", str(conns))}
    proxy: http://127.0.0.1:{p}
{timeouts}""")
    assert chat(ls.port, "m")[0] == 200  # starts m, reusing the health check's connection at once
    started = len(ls.output())  # the health checks while m was starting may have met "connection refused"
    if idle_conn:
        wait_all_closed(conns, ls)
    word.write_text("1\n")  # the member's keep-alive has run out on every idle connection: it is closing them
    st, body, _ = chat(ls.port, "m")
    if idle_conn is None:
        assert (st, body) == (502, b"")
        ls.wait_output("http: proxy error: EOF")
        assert drops.read_text() == "POST /v1/chat/completions\n"
    else:
        assert st == 200 and json.loads(body)["usage"]["completion_tokens"] == 5, body
        assert not drops.exists() and "proxy error" not in ls.output()[started:]
        assert chat(ls.port, "m")[0] == 200  # a connection the member keeps open serves (reused or not)


def wait_all_closed(conns, ls) -> None:
    """Wait until every connection the fake member accepted has closed (``--conn-log``: as many
    ``closed`` lines as ``open`` ones, at least one), bounded by :data:`HANG_S`."""
    deadline = time.monotonic() + HANG_S
    while True:
        events = conns.read_text().split() if conns.exists() else []
        if events and events.count("open") == events.count("closed"):
            return
        assert time.monotonic() < deadline, (events, ls.output())
        time.sleep(0.05)


def test_gpu_monitor_runs_nvidia_smi_in_loop_mode_and_stops_reading_when_it_exits(run_llama_swap, tmp_path):
    # perf/monitor_unix.go:136-179: one long-running `nvidia-smi --query-gpu=... --format=csv,noheader,nounits
    # --loop N` (N = performance.every in s), one GpuStat per line of >= 9 fields; when its stdout
    # ends the channel closes and monitor.go:166-169 logs the error and never restarts it.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argv_log = tmp_path / "argv"
    smi = bindir / "nvidia-smi"
    smi.write_text(f"""#!{__import__('sys').executable}
import sys
with open({str(argv_log)!r}, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
if any(a.startswith("--query-gpu=index,name,uuid,temperature.gpu") for a in sys.argv):
    print("0, NVIDIA GeForce RTX 3090, GPU-3c1f, 41, 7, 21000, 24576, 30, 112.50")
    sys.exit(0)  # prints once and exits, as a stub without --loop does
sys.exit(9)
""")
    smi.chmod(0o755)
    import os

    ls = run_llama_swap("performance:\n  every: 5s\nmodels: {}\n", PATH=f"{bindir}:{os.environ['PATH']}")
    ls.wait_output("using nvidia-smi for GPU monitoring")
    ls.wait_output("failed reading from gpuCh - stopping read goroutine")
    calls = argv_log.read_text().splitlines()
    assert ("--query-gpu=index,name,uuid,temperature.gpu,utilization.gpu,memory.used,memory.total,fan.speed,"
            "power.draw --format=csv,noheader,nounits --loop 5") in calls
    st, body, _ = ls.get("/api/performance")
    assert st == 200, body
    gpu = json.dumps(json.loads(body))
    assert "21000" in gpu and "24576" in gpu, gpu


assert FAKE_MEMBER.is_file()


def test_a_member_that_refuses_its_command_line_is_named_with_what_its_server_said(run_llama_swap, tmp_path):
    """llama-swap answers a member that exits at start with ``upstream command exited prematurely``
    only; what the server said (llama.cpp's ``error: invalid argument: FLAG``) is in the member's
    own log, ``GET /logs/stream/<id>``. The activation's failure message quotes it
    (rigkit.bench.llama_swap.member_log), so a typo in ``strata.args`` is named where the operator reads."""
    from rigkit.host import activate
    from rigkit.bench import llama_swap

    refuse = tmp_path / "refuse.py"  # llama-server's answer to an unknown flag (common/arg.cpp), exit 1
    refuse.write_text("import sys\nprint('error: invalid argument: --no-such-flag', file=sys.stderr)\nsys.exit(1)\n")
    ls = run_llama_swap(f"""
healthCheckTimeout: 15
models:
  strata:
    cmd: {sys.executable} {refuse}
    proxy: http://127.0.0.1:{free_port()}
""")
    base = f"http://127.0.0.1:{ls.port}"
    st, body, _ = chat(ls.port, "strata")
    assert st == 500 and b"exited prematurely" in body
    assert llama_swap.member_log(base, "strata")[-1] == "error: invalid argument: --no-such-flag"
    assert llama_swap.member_log(base, "no-such-member") == []
    key = tmp_path / "hyperqwen.env"
    key.write_text("VLLM_API_KEY=\n")
    host = activate.Host(base, "llama-swap.service", key)
    with pytest.raises(activate.ActivationError) as e:
        host.complete("strata", 10)
    msg = str(e.value)  # the log holds both starts, this one's last
    assert "exited prematurely" in msg and "; its server said: " in msg, msg
    assert msg.endswith("error: invalid argument: --no-such-flag"), msg


# --- issue 60: the bench reads llama-swap's loading and its start failures ------------------------

def _loading_config(port: int, extra: str = "", send: bool = True) -> str:
    return f"""
models:
  m:
    cmd: {member_cmd(port, "m", *extra.split())}
    proxy: http://127.0.0.1:{port}
{"    sendLoadingState: true" if send else ""}
"""


def test_the_bench_names_a_request_that_carried_a_swap_from_llama_swaps_own_frames(run_llama_swap):
    """``router/base.go:529-547``: a streamed chat request to a member not ready, with sendLoadingState,
    gets llama-swap's loading frames (``router/loading.go``) before the member's answer: the bench
    names the swap (model, frames, llama-swap's own Done!) and counts only the member's tokens."""
    from rigkit.bench.client import stream_chat

    ls = run_llama_swap(_loading_config(free_port()))
    r = stream_chat(f"http://127.0.0.1:{ls.port}/v1/chat/completions",
                    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    assert r.ok, r.error
    assert r.swap["model"] == "m" and r.swap["frames"] >= 4 and r.swap["llama_swap_s"] is not None
    assert (r.token_chunks, r.completion_tokens, r.tokens_source, r.reasoning_chars) == (5, 5, "usage", 0)
    assert r.answer == "w0 w1 w2 w3 w4 "
    again = stream_chat(f"http://127.0.0.1:{ls.port}/v1/chat/completions",
                        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    assert again.ok and again.swap is None  # ready now: no frames


@pytest.mark.parametrize("send", [True, False])
def test_a_member_llama_swap_could_not_start_is_a_bench_fail_quoting_llama_swap(run_llama_swap, send):
    """``process/process_command.go:506``: the member exits at start; llama-swap writes its error into
    the stream its loading writer began (send) or answers 500 with it (``swaputil/http.go:103, 124-131``):
    FAIL ``swap-failed`` quoting llama-swap, never "stream cut after N token chunks"."""
    from rigkit.bench.client import stream_chat

    ls = run_llama_swap(_loading_config(free_port(), "--exit-at-start 1", send))
    r = stream_chat(f"http://127.0.0.1:{ls.port}/v1/chat/completions",
                    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    assert (r.ok, r.error_kind) == (False, "swap-failed"), r.error
    assert "unspecific error: upstream command exited prematurely" in r.error
    assert ("of its loading frames" in r.error) is send and (r.status == 200) is send
