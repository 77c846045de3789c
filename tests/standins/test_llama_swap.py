"""The llama-swap stand-in, held to upstream v250's behaviour (notes/llama-swap.md).

Config tests run the loader in-process; behaviour tests run the built zipapp with
fake members on 127.0.0.1 ports from the OS.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time

import pytest

from standin_helpers import HERE, free_port, member_cmd, port_open, request, vram_mib
from llama_swap import config as lsconfig
from llama_swap.config import ConfigError, check_router, load_config, load_config_text, sanitize_command

DATA = os.path.join(HERE, "data")
EXAMPLE = os.path.join(DATA, "config.example.yaml")
EXAMPLE_ENV = {"HOME": "/home/op", "API_KEY_1": "sk-one", "API_KEY_2": "sk-two", "OPENROUTER_API_KEY": "sk-or"}


def _load_fixture(name: str):
    cfg = load_config(os.path.join(DATA, "errors", name))
    check_router(cfg)
    return cfg


# --------------------------------------------------------------------------- config


def test_upstream_example_is_rejected_where_upstream_code_rejects_it(monkeypatch):
    # Upstream's loader refuses its own example: `unlisted-model` has no proxy and no
    # ${PORT} in cmd (load.go; upstream TestConfig "Proxy value required if no ${PORT}
    # in cmd"). Upstream CI only schema-checks the example, it never loads it.
    for k, v in EXAMPLE_ENV.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError) as e:
        load_config(EXAMPLE)
    assert str(e.value) == (
        "model unlisted-model: proxy uses ${PORT} but cmd does not - ${PORT} is only available when used in cmd"
    )


def test_upstream_example_loads_with_its_two_dangling_references_fixed(monkeypatch):
    for k, v in EXAMPLE_ENV.items():
        monkeypatch.setenv(k, v)
    text = open(EXAMPLE).read()
    text = text.replace("    cmd: some-upstream-server\n", "    cmd: some-upstream-server\n    proxy: http://127.0.0.1:9\n")
    # the example's fifo priorities name models A-D that it never defines
    text = text.replace("        priority:\n          A: 10\n          B: 5\n          C: 5\n          D: 1\n",
                        "        priority: {}\n")
    cfg = load_config_text(text)
    assert sorted(cfg.models) == ["docker-llama", "gpt-oss-120b", "unlisted-model"]
    assert cfg.health_check_timeout == 500 and cfg.start_port == 10001
    # ${PORT} sequential from startPort in sorted model-ID order, only for models using it
    gpt = cfg.models["gpt-oss-120b"]
    assert cfg.models["docker-llama"].proxy == "http://127.0.0.1:10001"
    assert gpt.cmd.split() == ["/path/to/llama-server/llama-server-ec9e0301", "--port", "10002", "--model",
                               "path/to/gpt-oss-120B.gguf", "--ctx-size", "16384", "--temperature", "0.7"]
    assert gpt.proxy == "http://127.0.0.1:8999"
    assert "docker stop docker-llama" == cfg.models["docker-llama"].cmd_stop
    assert gpt.metadata["port"] == 10002 and gpt.metadata["temperature"] == 0.7
    assert gpt.aliases == ["gpt-4o-mini", "gpt-oss-120b:high", "gpt-oss-120b:low"]
    assert cfg.api_keys[2:] == ["sk-one", "sk-two"] and cfg.peers["openrouter"]["apiKey"] == "sk-or"
    assert cfg.preload == []  # "llama" is a selector, not a model: dropped silently
    assert set(cfg.groups) == {"group1", "group2", "forever", "(default)"}
    with pytest.raises(ConfigError) as e:  # the example's groups name models it never defines
        check_router(cfg)
    assert str(e.value) == 'creating group router: no model config for "forever-modelA"'


HARD_ERRORS = {
    "duplicate_alias.yaml": "duplicate alias shared found in model: b",
    "set_params_by_id_key_is_model_id.yaml":
        "model a filters.setParamsByID: key 'b' conflicts with an existing model ID",
    "set_params_by_id_key_is_other_alias.yaml":
        "duplicate alias 'x' in model b filters.setParamsByID, already used by model a",
    "negative_ttl.yaml": "model a: invalid TTL value -2",
    "negative_model_unload_timeout.yaml": "model a: invalid unloadTimeout value -1",
    "negative_unload_timeout.yaml": "unloadTimeout must be >= 0",
    "negative_global_ttl.yaml": "globalTTL must be >= 0",
    "start_port_below_one.yaml": "startPort must be greater than 1",
    "invalid_log_to_stdout.yaml": "logToStdout must be one of: proxy, upstream, both, none",
    "invalid_capability_modality.yaml":
        'model a: capabilities.in: invalid modality "video", must be one of: text, audio, image',
    "legacy_groups_and_routing_router.yaml":
        "config uses both the legacy top-level 'matrix'/'groups' keys and the new 'routing.router' block; "
        "please migrate the top-level keys into 'routing.router' and remove them",
    "groups_and_matrix.yaml": "config cannot use both 'groups' and 'matrix'",
    "model_in_two_groups.yaml": "model member a is used in multiple groups: g1 and g2",
    "duplicate_group_member.yaml": "duplicate model member a found in group: g1",
    "group_member_without_model.yaml": 'creating group router: no model config for "ghost"',
    "unknown_fifo_priority_model.yaml": 'routing.scheduler.settings.fifo.priority references unknown model "ghost"',
    "proxy_port_without_cmd_port.yaml":
        "model a: proxy uses ${PORT} but cmd does not - ${PORT} is only available when used in cmd",
    "macro_name_too_long.yaml":
        "macro name '%s' exceeds maximum length of 63 characters" % ("a" * 64),
    "macro_name_invalid_characters.yaml":
        "macro name 'bad.name' contains invalid characters, must match pattern ^[a-zA-Z0-9_-]+$",
    "macro_name_reserved.yaml": "macro name 'PORT' is reserved",
    "model_macro_name_reserved.yaml": "model a: macro name 'MODEL_ID' is reserved",
    "macro_self_reference.yaml": "macro 'loop' contains self-reference",
    "unknown_macro.yaml": "unknown macro '${nope}' found in a.cmd",
    "pid_macro_outside_cmd_stop.yaml": "unknown macro '${PID}' found in a.cmd",
    "performance_every_below_5s.yaml": "performance: every must be at least 5s, got 1s",
    "env_var_unset.yaml": "environment variable 'RIGKIT_TEST_SURELY_UNSET_VAR' is not set",
}


def test_every_error_fixture_has_a_message():
    assert sorted(os.listdir(os.path.join(DATA, "errors"))) == sorted(HARD_ERRORS)


@pytest.mark.parametrize("fixture", sorted(HARD_ERRORS))
def test_hard_error_has_upstream_message(fixture, monkeypatch):
    monkeypatch.delenv("RIGKIT_TEST_SURELY_UNSET_VAR", raising=False)
    with pytest.raises(ConfigError) as e:
        _load_fixture(fixture)
    assert str(e.value) == HARD_ERRORS[fixture]


def test_silent_rewrites_and_ignored_keys():
    cfg = load_config_text("""
healthCheckTimeout: 5          # clamped to 15
logLevel: chatty               # behaves as info
unloadTimeout: 0               # -> 10
globalTTL: 30
startPort: 7000
timeout: 99                    # unknown top-level keys are ignored
groups:
  g:
    preload: [b]               # unknown group key ignored (#1013)
    members: [b, c]
models:
  c:
    cmd: srv --port ${PORT} --id ${MODEL_ID}
    ttl: -1                    # -> globalTTL
    cmd_stop: ignored          # unknown key ignored
  b:
    cmd: |
      # a comment line
      srv --port ${PORT} \\
        --alias "two words"
    cmdStop: kill -TERM ${PID}
    ttl: 0
    unloadTimeout: 0           # -> global
  fixed:
    cmd: srv --port 18020
    proxy: http://127.0.0.1:18020
hooks:
  on_startup:
    preload: [ghost, " b "]    # unknown ids dropped, ids trimmed
""")
    assert cfg.health_check_timeout == 15 and cfg.log_level == "chatty"
    assert cfg.unload_timeout == 10 and cfg.models["b"].unload_timeout == 10
    assert cfg.models["c"].ttl == 30 and cfg.models["b"].ttl == 0
    # sorted model-ID order: b -> 7000, c -> 7001; `fixed` takes no port
    assert cfg.models["b"].proxy == "http://localhost:7000" and cfg.models["c"].proxy == "http://localhost:7001"
    assert cfg.models["c"].cmd == "srv --port 7001 --id c"
    assert cfg.models["b"].cmd_stop == "kill -TERM ${PID}"
    assert sanitize_command(cfg.models["b"].cmd) == ["srv", "--port", "7000", "--alias", "two words"]
    assert cfg.preload == ["b"]
    assert cfg.groups["(default)"].members == ["fixed"]
    assert cfg.groups["g"].swap and cfg.groups["g"].exclusive and not cfg.groups["g"].persistent


def test_cmd_is_split_without_a_shell():
    assert sanitize_command("srv a;b && c | d > e $(f)") == ["srv", "a;b", "&&", "c", "|", "d", ">", "e", "$(f)"]
    with pytest.raises(ConfigError, match="^empty command$"):
        sanitize_command("# only a comment\n")


def test_go_duration_formatting_matches_go():
    f = lsconfig.format_go_duration
    assert [f(120 * 10**9), f(15 * 10**9), f(5), f(1500 * 10**6), f(3723 * 10**9)] == [
        "2m0s", "15s", "5ns", "1.5s", "1h2m3s"]


# --------------------------------------------------------------------------- binary


def test_config_error_exits_1_with_upstream_log_line(standin_bin):
    path = os.path.join(DATA, "errors", "start_port_below_one.yaml")
    r = subprocess.run([sys.executable, "-I", "-S", standin_bin, "--config=" + path, "-listen", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stderr.rstrip().endswith(
        'ERROR failed to load config path=%s error="startPort must be greater than 1"' % path)


def test_flags_follow_go_flag_syntax(standin_bin):
    def run(*args):
        return subprocess.run([sys.executable, "-I", "-S", standin_bin] + list(args),
                              capture_output=True, text=True, timeout=30)

    assert run("--version").stdout.startswith("version: 250 (")
    assert run("-version=true").returncode == 0
    bad = run("-port", "8080")
    assert bad.returncode == 2 and bad.stderr.startswith("flag provided but not defined: -port\n")
    missing = run("-listen", "127.0.0.1:9")
    assert missing.returncode == 1 and missing.stderr.rstrip().endswith("ERROR -config is required")


@pytest.mark.slow
def test_built_tarball_installs_and_runs_on_plain_system_python(tarball, tmp_path):
    py = "/usr/bin/python3"
    if not os.path.exists(py):
        pytest.skip("no /usr/bin/python3 on this machine")
    assert os.path.basename(tarball) == "llama-swap_250_linux_amd64.tar.gz"
    with tarfile.open(tarball) as tf:
        assert sorted(tf.getnames()) == ["LICENSE", "README.md", "llama-swap"]
        assert tf.getmember("llama-swap").mode == 0o755
        tf.extractall(str(tmp_path / "x"))
    dest = tmp_path / "usr/local/bin"
    dest.mkdir(parents=True)
    shutil.copy2(str(tmp_path / "x/llama-swap"), str(dest / "llama-swap"))
    exe = str(dest / "llama-swap")
    env = {"PATH": "/usr/bin:/bin"}  # no venv: `env python3` finds /usr/bin/python3
    r = subprocess.run([exe, "-version"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "version: 250 (rigkit-standin), built at 2026-08-14T00:00:00Z\n"
    # -I -S: no site-packages, so YAML parsing must come from inside the zipapp
    path = os.path.join(DATA, "errors", "negative_ttl.yaml")
    r = subprocess.run([py, "-I", "-S", exe, "-config", path], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 1 and 'error="model a: invalid TTL value -2"' in r.stderr


def test_tarball_build_is_reproducible(tmp_path):
    import build_llama_swap as b

    one = b.sha256_file(b.build_tarball(str(tmp_path / "1")))
    two = b.sha256_file(b.build_tarball(str(tmp_path / "2")))
    assert one == two


# --------------------------------------------------------------------------- behaviour


def _chat(port, model, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    body.update(extra)
    return request(port, "POST", "/v1/chat/completions", body)


@pytest.mark.slow
def test_preload_at_start_then_running_models_health_and_version(run_standin, gpu_dir):
    pa, pb = free_port(), free_port()
    ls = run_standin(f"""
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
    st, body, _ = ls.get("/running")
    (entry,) = json.loads(body)["running"]
    assert entry["model"] == "strata" and entry["proxy"] == "http://127.0.0.1:%d" % pa and entry["ttl"] == 0
    assert entry["name"] == "Strata" and entry["cmd"].endswith("--vram-mib 21000")
    assert ls.get("/health")[:2] == (200, b"OK")
    assert json.loads(ls.get("/api/version")[1])["version"] == "250"
    ids = [m["id"] for m in json.loads(ls.get("/v1/models")[1])["data"]]
    assert ids == ["baseline", "strata"]
    assert "[INFO] preloading model: strata" in ls.output()


@pytest.mark.slow
def test_completion_and_stream_pass_through_with_use_model_name(run_standin):
    p = free_port()
    ls = run_standin(f"""
startPort: {p}
models:
  tiny:
    cmd: {member_cmd(0, "tiny", "--tokens", "4", "--token-delay", "0.15").replace("--port 0", "--port ${PORT}")}
    useModelName: served-name
    aliases: [tiny-alias]
""")
    st, body, _ = _chat(ls.port, "tiny-alias")
    assert st == 200, body
    reply = json.loads(body)
    assert reply["model"] == "served-name" and reply["usage"]["completion_tokens"] == 4
    st, body, _ = request(ls.port, "POST", "/v1/completions", {"model": "tiny", "prompt": "x"})
    assert st == 200 and json.loads(body)["object"] == "text_completion"

    # stream: chunks arrive one by one, not buffered until the end
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", ls.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(
        {"model": "tiny", "stream": True, "stream_options": {"include_usage": True}, "messages": []}),
        {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    assert r.getheader("X-Accel-Buffering") == "no"
    t0 = time.monotonic()
    first = r.readline()
    first_at = time.monotonic() - t0
    rest = r.read()
    total = time.monotonic() - t0
    conn.close()
    assert first.startswith(b"data: ") and first_at < total - 0.3
    events = [json.loads(l[6:]) for l in (first + rest).split(b"\n") if l.startswith(b"data: {")]
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"]) == "w0 w1 w2 w3 "
    assert events[-1]["usage"]["completion_tokens"] == 4 and rest.rstrip().endswith(b"data: [DONE]")
    st, body, _ = _chat(ls.port, "nope")
    assert st == 404 and json.loads(body) == {"src": "llama-swap", "error": {
        "message": "no router for requested model", "type": "invalid_request_error", "param": None,
        "code": "not_found"}}


@pytest.mark.slow
def test_swap_in_exclusive_group_stops_other_member_and_frees_vram_first(run_standin, gpu_dir, tmp_path):
    pa, pb = free_port(), free_port()
    seen = tmp_path / "b-saw-vram"
    ls = run_standin(f"""
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
    st, body, _ = _chat(ls.port, "b")
    assert st == 200 and json.loads(body)["served_by"] == "b"
    assert ls.running() == {"b": "ready"}
    assert seen.read_text().strip() == "0"  # a's VRAM was gone before b started
    assert vram_mib(gpu_dir) == 19000 and not port_open(pa)


@pytest.mark.slow
def test_member_whose_cmd_exits_fails_its_start_at_once(run_standin):
    p1, p2 = free_port(), free_port()
    ls = run_standin(f"""
healthCheckTimeout: 15
models:
  crash:
    cmd: {member_cmd(p1, "crash", "--exit-at-start", "1")}
    proxy: http://127.0.0.1:{p1}
  dies-while-loading:
    cmd: {member_cmd(p2, "dies", "--never-healthy", "--die-after", "0.6")}
    proxy: http://127.0.0.1:{p2}
""")
    for model in ("crash", "dies-while-loading"):
        t0 = time.monotonic()
        st, body, _ = _chat(ls.port, model)
        elapsed = time.monotonic() - t0
        assert st == 500
        assert json.loads(body)["error"]["message"] == "unspecific error: upstream command exited prematurely"
        assert elapsed < 3.0, "start took %.1fs, healthCheckTimeout is 15s" % elapsed
    assert ls.running() == {}


@pytest.mark.slow
def test_member_never_healthy_fails_after_health_check_timeout(run_standin):
    p = free_port()
    ls = run_standin(f"""
models:
  stuck:
    cmd: {member_cmd(p, "stuck", "--never-healthy")}
    proxy: http://127.0.0.1:{p}
""", RIGKIT_STANDIN_HEALTH_TIMEOUT_S="2")
    t0 = time.monotonic()
    st, body, _ = _chat(ls.port, "stuck")
    elapsed = time.monotonic() - t0
    assert st == 500 and json.loads(body)["error"]["message"] == "unspecific error: health check timed out after 2s"
    assert 2.0 <= elapsed < 6.0
    assert ls.running() == {} and not port_open(p)  # the stuck member was killed


@pytest.mark.slow
def test_ttl_unloads_idle_member(run_standin, gpu_dir):
    p = free_port()
    ls = run_standin(f"""
models:
  brief:
    cmd: {member_cmd(p, "brief", "--vram-mib", "500")}
    proxy: http://127.0.0.1:{p}
    ttl: 1
""")
    assert _chat(ls.port, "brief")[0] == 200
    assert vram_mib(gpu_dir) == 500
    ls.wait_running({}, timeout=5)
    assert vram_mib(gpu_dir) == 0 and not port_open(p)
    assert "[INFO] <brief> Unloading model, TTL of 1s reached" in ls.output()


@pytest.mark.slow
def test_unload_frees_member_port_and_vram(run_standin, gpu_dir, tmp_path):
    pa, pb, pc = free_port(), free_port(), free_port()
    sig = tmp_path / "b-signals"
    ls = run_standin(f"""
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
        assert _chat(ls.port, m)[0] == 200
    assert vram_mib(gpu_dir) == 7000

    assert ls.post("/api/models/unload/a")[:2] == (200, b"OK")
    assert not port_open(pa) and vram_mib(gpu_dir) == 6000
    assert ls.running() == {"b": "ready", "stubborn": "ready"}

    assert ls.post("/api/models/unload/b")[:2] == (200, b"OK")  # through cmdStop, not SIGTERM
    assert sig.read_text() == "SIGINT\n" and not port_open(pb)

    t0 = time.monotonic()
    st, body, _ = ls.post("/api/models/unload")  # SIGTERM ignored: SIGKILL after unloadTimeout
    assert (st, json.loads(body)) == (200, {"msg": "ok"}) and time.monotonic() - t0 >= 1.0
    assert ls.running() == {} and vram_mib(gpu_dir) == 0 and not port_open(pc)
    st, body, _ = ls.post("/api/models/unload/ghost")
    assert st == 404 and json.loads(body)["error"]["message"] == "model not found"
    assert _chat(ls.port, "a")[0] == 200
    assert ls.get("/unload")[:2] == (200, b"OK") and ls.running() == {}


@pytest.mark.slow
def test_requests_queue_while_member_starts_and_share_one_start(run_standin):
    p = free_port()
    ls = run_standin(f"""
models:
  slow:
    cmd: {member_cmd(p, "slow", "--health-delay", "1.0")}
    proxy: http://127.0.0.1:{p}
""")
    results = []
    threads = [threading.Thread(target=lambda: results.append(_chat(ls.port, "slow")[0])) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.4)
    assert ls.running() == {"slow": "starting"}
    for t in threads:
        t.join(20)
    assert results == [200, 200, 200]
    assert ls.output().count("<slow> Health check passed") == 1


@pytest.mark.slow
def test_busy_member_is_not_evicted_mid_request(run_standin):
    pa, pb = free_port(), free_port()
    ls = run_standin(f"""
models:
  a:
    cmd: {member_cmd(pa, "a", "--tokens", "8", "--token-delay", "0.15")}
    proxy: http://127.0.0.1:{pa}
  b:
    cmd: {member_cmd(pb, "b")}
    proxy: http://127.0.0.1:{pb}
""")
    assert _chat(ls.port, "a")[0] == 200
    done = {}

    def stream_a():
        st, body, _ = _chat(ls.port, "a", stream=True)
        done["a"] = (time.monotonic(), st, body)

    t = threading.Thread(target=stream_a)
    t.start()
    time.sleep(0.3)  # a is mid-stream
    st, body, _ = _chat(ls.port, "b")
    done["b"] = time.monotonic()
    t.join(20)
    a_at, a_st, a_body = done["a"]
    assert a_st == 200 and a_body.rstrip().endswith(b"data: [DONE]") and a_body.count(b'"content"') == 8
    assert st == 200 and done["b"] >= a_at
    assert ls.running() == {"b": "ready"}


@pytest.mark.slow
def test_sigterm_stops_every_member_and_exits_0(run_standin, gpu_dir):
    pa, pb = free_port(), free_port()
    ls = run_standin(f"""
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
    assert ls.stop() == 0
    assert vram_mib(gpu_dir) == 0 and not port_open(pa) and not port_open(pb)
    out = ls.output()
    assert "[INFO] received signal terminated, shutting down" in out and out.rstrip().endswith("shutdown complete")


def test_config_dir_fragments_merge_in_filename_order(tmp_path):
    from llama_swap.cli import load

    main = tmp_path / "config.yaml"
    main.write_text("healthCheckTimeout: 30\nhooks:\n  on_startup:\n    preload: [a]\n")
    d = tmp_path / "conf.d"
    d.mkdir()
    (d / "20-b.yaml").write_text("models:\n  b:\n    cmd: srv --port ${PORT}\n"
                                 "hooks:\n  on_startup:\n    preload: [b]\n")
    (d / "10-a.yml").write_text("models:\n  a:\n    cmd: srv --port ${PORT}\n")
    cfg = load(str(main), str(d))
    assert sorted(cfg.models) == ["a", "b"] and cfg.preload == ["a", "b"] and cfg.health_check_timeout == 30
    (d / "30-dup.yaml").write_text("models:\n  a:\n    cmd: other --port ${PORT}\n")
    with pytest.raises(ConfigError):
        load(str(main), str(d))


@pytest.mark.slow
def test_member_exiting_after_ready_is_marked_stopped_and_restarted_by_next_request(run_standin):
    p = free_port()
    ls = run_standin(f"""
models:
  flaky:
    cmd: {member_cmd(p, "flaky", "--die-after", "0.8")}
    proxy: http://127.0.0.1:{p}
""")
    assert _chat(ls.port, "flaky")[0] == 200
    ls.wait_running({}, timeout=5)
    assert "[WARN] <flaky> upstream process exited unexpectedly" in ls.output()
    assert _chat(ls.port, "flaky")[0] == 200  # no negative caching: the next request restarts it


@pytest.mark.slow
def test_sighup_reloads_config_and_stops_old_members(run_standin):
    import signal as _signal

    pa, pb = free_port(), free_port()
    ls = run_standin(f"""
models:
  a:
    cmd: {member_cmd(pa, "a")}
    proxy: http://127.0.0.1:{pa}
hooks:
  on_startup:
    preload: [a]
""")
    ls.wait_running({"a": "ready"})
    with open(ls.config, "w") as f:
        f.write(f"""
models:
  b:
    cmd: {member_cmd(pb, "b")}
    proxy: http://127.0.0.1:{pb}
hooks:
  on_startup:
    preload: [b]
""")
    ls.proc.send_signal(_signal.SIGHUP)
    ls.wait_running({"b": "ready"})
    assert not port_open(pa)
    assert [m["id"] for m in json.loads(ls.get("/v1/models")[1])["data"]] == ["b"]
    with open(ls.config, "w") as f:
        f.write("startPort: 0\nmodels: {}\n")
    ls.proc.send_signal(_signal.SIGHUP)  # an invalid config is logged and the old one kept
    deadline = time.monotonic() + 5
    while "failed to reload config: startPort must be greater than 1" not in ls.output():
        assert time.monotonic() < deadline, ls.output()
        time.sleep(0.05)
    assert ls.running() == {"b": "ready"}
