"""The one renderer: paths, modes, owners and what each file must (not) say."""

from __future__ import annotations

import hashlib
import json

import yaml
from hypothesis import given, settings, strategies as st

from rigkit import paths
from rigkit.spec.cmdline import split_command as split_cmd
from rigkit.render.files import render, write_tree
from rigkit.spec.validate import spec_from_dict

UNITS = paths.UNIT_DIR


def files_for(data: dict | None = None):
    return render(spec_from_dict(data or {}))


def test_every_rendered_path_mode_and_owner():
    files = files_for()
    assert {p: (f.mode, f.owner) for p, f in files.items()} == {
        "/opt/rigkit/hyperqwen/compose.yaml": ("0644", "root:root"),
        "/opt/rigkit/hyperqwen/.env": ("0640", "root:llama-swap"),
        "/etc/llama-swap/config.yaml": ("0640", "root:llama-swap"),
        "/etc/llama-swap/config.staged.yaml": ("0640", "root:llama-swap"),
        "/etc/modprobe.d/rigkit-nouveau.conf": ("0644", "root:root"),
        "/etc/rigkit/host.json": ("0644", "root:root"),
        "/etc/rigkit/pacman-pins.conf": ("0644", "root:root"),
        f"{UNITS}/llama-swap.service": ("0644", "root:root"),
        f"{UNITS}/hyperqwen.service": ("0644", "root:root"),
        f"{UNITS}/gpu-power-limit.service": ("0644", "root:root"),
        f"{UNITS}/hyperqwen-watchdog.service": ("0644", "root:root"),
        f"{UNITS}/hyperqwen-watchdog.timer": ("0644", "root:root"),
        f"{UNITS}/rigkit-keeper.service": ("0644", "root:root"),
        f"{UNITS}/rigkit-keeper.timer": ("0644", "root:root"),
        f"{UNITS}/rigkit-power.service": ("0644", "root:root"),
        f"{UNITS}/rigkit-power.timer": ("0644", "root:root"),
    }
    text, mode, owner = files["/opt/rigkit/hyperqwen/.env"]
    assert (mode, owner) == ("0640", "root:llama-swap")


def test_no_secret_file_is_ever_rendered():
    assert not [p for p in files_for() if p.startswith(paths.SECRETS_DIR)]


def test_live_config_holds_only_unstaged_members_and_staged_holds_all():
    files = files_for()
    live = yaml.safe_load(files[paths.LLAMA_SWAP_CONFIG].text)
    staged = yaml.safe_load(files[paths.LLAMA_SWAP_STAGED].text)
    assert list(live["models"]) == ["strata", "gguf-baseline"]
    assert list(staged["models"]) == ["strata", "gguf-baseline", "hyperqwen"]
    assert live["routing"]["router"]["settings"]["groups"]["gpu"]["members"] == ["strata", "gguf-baseline"]
    assert staged["routing"]["router"]["settings"]["groups"]["gpu"] == {
        "swap": True, "exclusive": True, "persistent": False, "members": ["strata", "gguf-baseline", "hyperqwen"]}
    assert live["hooks"]["on_startup"]["preload"] == ["strata"]
    assert live["models"]["strata"]["ttl"] == 0


def test_llama_swap_drops_every_members_idle_connections_before_the_member_does():
    # issue #25: llama.cpp's server (cpp-httplib) and vLLM's uvicorn close a keep-alive connection after
    # 5 s idle; llama-swap's default timeouts.idleConn is 90 s (internal/config/model_config.go:141-147), so
    # a POST it sent on a connection the member was closing got a 502 with an empty body
    for path in (paths.LLAMA_SWAP_CONFIG, paths.LLAMA_SWAP_STAGED):
        models = yaml.safe_load(files_for()[path].text)["models"]
        assert {m: c["timeouts"] for m, c in models.items()} == {m: {"idleConn": 2} for m in models}
    one = files_for({"llama_swap": {"members": {"gguf-baseline": {"idle_conn_s": 1}}}})
    models = yaml.safe_load(one[paths.LLAMA_SWAP_CONFIG].text)["models"]
    assert models["gguf-baseline"]["timeouts"] == {"idleConn": 1} and models["strata"]["timeouts"] == {"idleConn": 2}


def test_flipping_staged_wires_hyperqwen_into_the_live_config():
    live = yaml.safe_load(files_for({"llama_swap": {"members": {"hyperqwen": {"staged": False}}}})[
        paths.LLAMA_SWAP_CONFIG].text)
    hq = live["models"]["hyperqwen"]
    assert hq["proxy"] == "http://127.0.0.1:18020"
    assert hq["useModelName"] == "qwen3.8-27b"
    # split as llama-swap does (comment lines and trailing backslashes dropped, shlex, no shell)
    assert split_cmd(hq["cmd"]) == ["docker", "compose", "--project-name", "hyperqwen", "--file",
                                    "/opt/rigkit/hyperqwen/compose.yaml", "up", "--no-deps", "--no-log-prefix",
                                    "single"]
    assert hq["cmdStop"] == ("docker compose --project-name hyperqwen --file /opt/rigkit/hyperqwen/compose.yaml "
                             "stop --timeout 30 single")
    assert hq["unloadTimeout"] >= 30


def test_llamacpp_members_run_in_the_foreground_with_a_fixed_name():
    cfg = yaml.safe_load(files_for({"strata": {"model_file": "strata-q5.gguf", "args": ["--jinja"],
                                               "image": {"ref": "server-cuda-b6100"}}})[paths.LLAMA_SWAP_CONFIG].text)
    cmd = split_cmd(cfg["models"]["strata"]["cmd"])
    assert cmd[:5] == ["docker", "run", "--rm", "--init", "--name"]
    assert "-d" not in cmd and "--detach" not in cmd
    assert "ghcr.io/ggml-org/llama.cpp:server-cuda-b6100" in cmd
    assert cmd[cmd.index("--model") + 1] == "/models/strata-q5.gguf"
    assert cmd[cmd.index("--publish") + 1] == "127.0.0.1:18030:18030"
    assert cmd[-1] == "--jinja"
    assert cfg["models"]["strata"]["cmdStop"] == "docker stop --time 10 strata"


def test_llama_swap_unit_has_no_requires_on_a_member():
    unit = files_for()[f"{UNITS}/llama-swap.service"].text
    assert "Requires=" not in unit.replace("# No Requires=", "")
    assert "After=network-online.target docker.service" in unit
    assert "Wants=network-online.target docker.service" in unit
    assert "User=llama-swap" in unit and "SupplementaryGroups=docker" in unit
    assert "ExecStart=/usr/local/bin/llama-swap -config /etc/llama-swap/config.yaml -listen 127.0.0.1:8080" in unit


def test_hyperqwen_unit_is_installable_but_never_enabled():
    unit = files_for()[f"{UNITS}/hyperqwen.service"].text
    assert "\n[Install]" not in unit
    assert "ExecStart=/usr/bin/docker compose --project-name hyperqwen" in unit


def test_power_limit_unit_uses_the_declared_watts():
    unit = files_for({"gpu_power_limit_w": 390})[f"{UNITS}/gpu-power-limit.service"].text
    assert "ExecStart=/usr/bin/nvidia-smi --id=0 --power-limit=390" in unit  # powerlimit.set_argv(GPU_INDEX, 390)
    assert "After=nvidia-persistenced.service" in unit and "Type=oneshot" in unit


def test_env_has_the_knobs_and_no_secret():
    env = files_for({"hyperqwen": {"extra_env": {"INT8_ACT": "1"}}})[paths.HYPERQWEN_ENV].text
    lines = [ln for ln in env.splitlines() if ln and not ln.startswith("#")]
    assert lines == ["SPEC=dflash2", "PREFIX_CACHE=1", "DFLASH_TOKENS=7", "WARMUP=0", "CTX=fast", "MAX_LEN=65536",
                     "GPU_UTIL=0.92", "FAST_VARIANT=0", "DFLASH2=1", "PORT=18020", "BIND=127.0.0.1",
                     "MODELS_DIR=/srv/models/hyperqwen", "GPU_COUNT=1", "NO_DOWNLOAD=1", "INT8_ACT=1"]
    assert "VLLM_API_KEY" not in "\n".join(lines) and "HF_TOKEN" not in env


def test_compose_keeps_upstream_services_with_image_pinned_and_no_restart():
    compose = yaml.safe_load(files_for({"hyperqwen": {"image": {"ref": "sha256:" + "b" * 64}}})[
        paths.HYPERQWEN_COMPOSE].text)
    assert set(compose["services"]) == {"prepare", "single", "batch"}
    assert compose["volumes"] == {"qwen-cache": None}
    single = compose["services"]["single"]
    assert single["image"] == "ghcr.io/syv-ai/hyperqwen@sha256:" + "b" * 64
    assert single["restart"] == "no"
    assert single["command"] == "single" and single["profiles"] == ["single"]
    assert single["ports"] == ["${BIND:-127.0.0.1}:${PORT:-18020}:${PORT:-18020}"]
    assert "${MODELS_DIR:-./models}:/app/models" in single["volumes"]
    assert single["environment"] == {"HOME": "/cache"}
    assert single["depends_on"] == {"prepare": {"condition": "service_completed_successfully"}}


def test_unset_values_render_as_visible_placeholders():
    text = files_for()[paths.LLAMA_SWAP_CONFIG].text
    assert "RIGKIT-UNSET-strata-model-file" in text
    # an image's tag is declared by default (rigkit lock resolves it to the digest the deploy renders)
    assert "llama.cpp:server-cuda" in text
    unset_ref = render(spec_from_dict({"strata": {"image": {"ref": ""}}}))[paths.LLAMA_SWAP_CONFIG].text
    assert "llama.cpp:RIGKIT-UNSET-image-ref" in unset_ref


def test_render_is_deterministic():
    assert {p: f.text for p, f in files_for().items()} == {p: f.text for p, f in files_for().items()}


def test_write_tree_writes_files_at_remote_paths_and_a_manifest(tmp_path):
    files = files_for()
    man = json.loads(write_tree(files, tmp_path).read_text())
    assert [m["path"] for m in man] == sorted(files)
    for entry in man:
        on_disk = (tmp_path / entry["path"].lstrip("/")).read_bytes()
        assert hashlib.sha256(on_disk).hexdigest() == entry["sha256"]
        assert oct((tmp_path / entry["path"].lstrip("/")).stat().st_mode & 0o777) == oct(int(entry["mode"], 8))
    env_entry = next(m for m in man if m["path"] == "/opt/rigkit/hyperqwen/.env")
    assert (env_entry["mode"], env_entry["owner"]) == ("0640", "root:llama-swap")


def test_operator_units_are_rendered_as_they_are(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sync.timer").write_text("[Timer]\nOnCalendar=hourly\n[Install]\nWantedBy=timers.target\n")
    files = render(spec_from_dict({"operator_units": ["sync.timer"]}))
    assert tuple(files[f"{UNITS}/sync.timer"]) == ("[Timer]\nOnCalendar=hourly\n[Install]\nWantedBy=timers.target\n", "0644",
                                            "root:root")


def test_compose_refuses_to_start_hyperqwen_without_its_api_key_file():
    """The secret file is required: compose refuses to start rather than serve without VLLM_API_KEY."""
    import yaml

    from rigkit.render.files import render
    from rigkit.spec.validate import spec_from_layers

    compose = yaml.safe_load(render(spec_from_layers([{}]))["/opt/rigkit/hyperqwen/compose.yaml"].text)
    env_files = compose["x-hyperqwen"]["env_file"]
    assert {"path": "/etc/rigkit/secrets/hyperqwen.env", "required": True} in env_files


_MINE = {"cmd": "docker run --rm --init --name mine --label rigkit.member=mine img --port 18050", "cmd_stop": "docker stop mine",
         "proxy": "http://127.0.0.1:18050", "vram_gib": 4.0, "cold_boot_s": 30, "ttl": 300}


@settings(max_examples=30, deadline=None)
@given(staged=st.fixed_dictionaries({"gguf-baseline": st.booleans(), "hyperqwen": st.booleans(), "mine": st.booleans()}),
       extra=st.booleans())
def test_the_live_unit_is_the_same_whichever_members_are_staged(staged, extra):
    """Issue 61: staging a member (or declaring one staged) never rewrites llama-swap.service, so the
    deploy never restarts the proxy for it; the live config changes only with the live set."""
    members = {mid: {"staged": s} for mid, s in staged.items() if mid != "mine"}
    groups = ["strata", "gguf-baseline", "hyperqwen"]
    if extra:
        members["mine"] = {**_MINE, "staged": staged["mine"]}
        groups.append("mine")
    files = files_for({"llama_swap": {"members": members, "groups": {"gpu": {"members": groups}}}})
    base = files_for()
    assert files[f"{UNITS}/llama-swap.service"].text == base[f"{UNITS}/llama-swap.service"].text
    live = set(yaml.safe_load(files[paths.LLAMA_SWAP_CONFIG].text)["models"])
    assert live == {"strata"} | {m for m in members if not (members[m].get("staged") or False)}
    # flipping a staged member to staged-and-changed leaves the live config alone
    changed = {m: ({**v, "description": "changed while staged"} if v.get("staged") else v) for m, v in members.items()}
    assert files[paths.LLAMA_SWAP_CONFIG].text == files_for(
        {"llama_swap": {"members": changed, "groups": {"gpu": {"members": groups}}}})[paths.LLAMA_SWAP_CONFIG].text


def test_the_unit_clears_every_labelled_container_before_llama_swap_starts(tmp_path):
    """ExecStartPre runs through a real /bin/sh: ``docker ps`` filtered by rigkit's label, then
    ``docker rm --force`` of exactly the ids it printed (nothing when none: xargs -r)."""
    import subprocess

    unit = files_for()[f"{UNITS}/llama-swap.service"].text
    line = next(x for x in unit.splitlines() if x.startswith("ExecStartPre="))
    argv = split_cmd(line.removeprefix("ExecStartPre=-"))
    assert argv[:2] == [paths.SH_BIN, "-c"]
    fake = tmp_path / "docker"
    log = tmp_path / "calls"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n"
                    "case \"$1\" in ps) [ -e " + str(tmp_path / "none") + " ] || printf 'aaa\\nbbb\\n';; esac\n")
    fake.chmod(0o755)
    script = argv[2].replace(paths.DOCKER_BIN, str(fake))
    subprocess.run([argv[0], "-c", script], check=True)
    assert log.read_text().splitlines() == [f"ps --all --quiet --filter label={paths.MEMBER_LABEL}", "rm --force aaa bbb"]
    log.unlink()
    (tmp_path / "none").touch()
    subprocess.run([argv[0], "-c", script], check=True)
    assert log.read_text().splitlines() == [f"ps --all --quiet --filter label={paths.MEMBER_LABEL}"]


def test_every_llamacpp_member_carries_rigkits_label():
    cfg = yaml.safe_load(files_for({"llama_swap": {"members": {"hyperqwen": {"staged": False}}}})[paths.LLAMA_SWAP_CONFIG].text)
    for mid in ("strata", "gguf-baseline"):
        cmd = split_cmd(cfg["models"][mid]["cmd"])
        assert cmd[cmd.index("--label") + 1] == f"{paths.MEMBER_LABEL}={mid}"


HQ_VARIANT = st.fixed_dictionaries({}, optional={
    "dflash_tokens": st.integers(1, 7),
    "max_model_len": st.sampled_from([8192, 12288, 65536]),
    "gpu_memory_utilization": st.sampled_from([0.85, 0.92]),
    "prefix_cache": st.booleans(),
    "stop_timeout_s": st.sampled_from([20, 30]),
    "image": st.builds(lambda h: {"ref": "sha256:" + h}, st.sampled_from(["a" * 64, "b" * 64])),
    "extra_env": st.dictionaries(st.sampled_from(["INT8_ACT", "VLLM_LOGGING_LEVEL"]), st.sampled_from(["1", "DEBUG"]),
                                 max_size=2),
})
OTHER_VARIANT = st.fixed_dictionaries({}, optional={
    "strata": st.fixed_dictionaries({"args": st.sampled_from([["--threads", "4"], ["--threads", "8"]])}),
    "llama_swap": st.fixed_dictionaries({"health_check_timeout_s": st.sampled_from([300, 600])}),
})


@settings(max_examples=60, deadline=None)
@given(a=HQ_VARIANT, b=HQ_VARIANT, other_a=OTHER_VARIANT, other_b=OTHER_VARIANT)
def test_a_change_to_what_hyperqwens_container_is_made_from_changes_its_member(a, b, other_a, other_b):
    """HyperQwen's member in the live config changes exactly when its compose.yaml or .env does — the image's
    digest, any engine knob — whatever else changes beside it: llama-swap starts it with ``docker compose up
    single``, which names neither file, so without the member's ``starts_from_sha256`` a deploy of a new image
    or ``DFLASH_TOKENS`` left the running container as it was (found by issue 68's planted pair). The host's
    activation then counts it changed (``swapconfig.member_diff``: it restarts llama-swap and asks it)."""
    from rigkit.common import swapconfig

    def rendered(hq, other):
        data = {**other, "hyperqwen": hq}
        data["llama_swap"] = {**other.get("llama_swap", {}), "members": {"hyperqwen": {"staged": False}}}
        return files_for(data)

    fa, fb = rendered(a, other_a), rendered(b, other_b)
    made_from = [paths.HYPERQWEN_COMPOSE, paths.HYPERQWEN_ENV]
    differs = any(fa[p].text != fb[p].text for p in made_from)
    old, new = (yaml.safe_load(f[paths.LLAMA_SWAP_CONFIG].text) for f in (fa, fb))
    assert ("hyperqwen" in swapconfig.member_diff(old, new)["changed"]) == differs
    if differs:
        assert "hyperqwen" in swapconfig.probe_order(old, new)
    assert "VLLM_API_KEY" not in fb[paths.LLAMA_SWAP_CONFIG].text
