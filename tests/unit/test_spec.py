"""RigSpec: defaults, deep merge, and every bad input with its exact message."""

from __future__ import annotations

from pathlib import Path

import pytest

from rigkit.spec.layers import merge_layers, split_pyinfra_keys
from rigkit.spec.model import unset_operator_values
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import spec_from_dict, spec_from_layers, spec_warnings

GOOD_PINS = {
    "nvidia-open-dkms": "610.57-1",
    "nvidia-utils": "610.57-1",
    "opencl-nvidia": "610.57-1",
    "cuda": "13.3.0-1",
}


def problems_of(data: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data)
    return [str(p) for p in info.value.problems]


def test_defaults_are_the_rig():
    spec = spec_from_dict({})
    assert spec.nvidia_driver_version == "610.57"
    assert spec.driver_flavour == "nvidia-open-dkms"
    assert spec.cuda_version == "13.3"
    assert spec.gpu_power_limit_w == 420
    assert spec.gpu_vram_gib == 24.0
    assert spec.legacy_units == ["strata.service"]
    hq = spec.hyperqwen
    assert (hq.port, hq.spec, hq.prefix_cache, hq.dflash_tokens, hq.warmup, hq.max_model_len) == (
        18020, "dflash2", True, 7, False, 65536)
    assert spec.hyperqwen.image.repository == "ghcr.io/syv-ai/hyperqwen"
    assert spec.models["hyperqwen"].repo_id == "dbirks/Qwen3.8-27B-W4A16-AutoRound"
    assert spec.llama_swap.port == 8080 and spec.strata.port == 18030 and spec.gguf_baseline.port == 18040
    assert spec.llama_swap.members["hyperqwen"].staged is True
    assert spec.llama_swap.members["strata"].ttl == 0
    assert spec.llama_swap.preload == ["strata"]


def test_one_nested_override_keeps_the_other_defaults_of_that_dict():
    spec = spec_from_layers([{"hyperqwen": {"dflash_tokens": 5}}])
    assert spec.hyperqwen.dflash_tokens == 5
    assert spec.hyperqwen.port == 18020
    assert spec.hyperqwen.max_model_len == 65536
    assert spec.hyperqwen.image.repository == "ghcr.io/syv-ai/hyperqwen"


def test_layers_merge_in_precedence_order_lowest_first():
    spec = spec_from_layers([
        {"hyperqwen": {"dflash_tokens": 5, "ctx": "long"}},          # all
        {"hyperqwen": {"dflash_tokens": 6}},                         # a group
        {"llama_swap": {"members": {"hyperqwen": {"staged": False}}}},  # the host
    ])
    assert spec.hyperqwen.dflash_tokens == 6
    assert spec.hyperqwen.ctx == "long"
    assert spec.llama_swap.members["hyperqwen"].staged is False
    assert spec.llama_swap.members["hyperqwen"].cold_boot_s == 180


def test_merge_layers_replaces_lists_and_merges_dicts():
    assert merge_layers({"a": {"b": 1, "c": [1]}}, {"a": {"c": [2]}}) == {"a": {"b": 1, "c": [2]}}


def test_pyinfra_keys_pass_through():
    ours, theirs = split_pyinfra_keys({"ssh_port": 22, "_sudo": True, "gpu_power_limit_w": 400})
    assert ours == {"gpu_power_limit_w": 400}
    assert theirs == {"ssh_port": 22, "_sudo": True}
    spec = spec_from_layers([{"ssh_hostname": "x", "_sudo": True, "chroot_directory": "/r"}])
    assert spec.gpu_power_limit_w == 420


def test_unset_operator_values_are_named_once_each():
    keys = unset_operator_values(spec_from_dict({}))
    # the pins' full versions, image digests and the release's sha256 are no longer asked of the operator:
    # rigkit lock resolves them from the series, the tags and the version (rigkit.lockfile.resolve)
    assert keys == [
        "operator_user", "paused_timers", "lock_files", "strata.model_file", "strata.args",
        "gguf_baseline.model_file", "models.hyperqwen-dflash2.repo_id",
        "models.gguf-baseline.repo_id", "models.strata.repo_id",
    ]
    assert len(spec_warnings(spec_from_dict({}))) == len(keys)


def test_setting_an_operator_value_removes_its_warning():
    spec = spec_from_dict({"pacman_pins": GOOD_PINS, "operator_user": "op"})
    assert "pacman_pins" not in unset_operator_values(spec)
    assert "operator_user" not in unset_operator_values(spec)


def test_image_tag_is_intent_the_lock_pins_its_digest():
    """A tag (even a moving one) is what the operator wants; the lock pins the digest the deploy pulls
    (rigkit.lockfile.resolve), so a tag is no longer a warning and a digest is used as it is."""
    spec = spec_from_dict({"hyperqwen": {"image": {"ref": "latest"}},
                           "strata": {"image": {"ref": "sha256:" + "a" * 64}}})
    texts = [str(w) for w in spec_warnings(spec)]
    assert not any(t.startswith(("hyperqwen.image.ref", "strata.image.ref")) for t in texts)
    assert spec.strata.image.reference() == "ghcr.io/ggml-org/llama.cpp@sha256:" + "a" * 64
    assert spec.hyperqwen.image.reference() == "ghcr.io/syv-ai/hyperqwen:latest"


# --- bad inputs, each with its exact message ---------------------------------------------------

BAD_INPUTS = [
    pytest.param({"gpu_powr_limit_w": 420},
                 "gpu_powr_limit_w: unknown key — not a rigkit or pyinfra key (did you mean 'gpu_power_limit_w'?)",
                 id="typo-top-level"),
    pytest.param({"hyperqwen": {"dflash_token": 5}},
                 "hyperqwen.dflash_token: unknown key — not a rigkit or pyinfra key (did you mean 'dflash_tokens'?)",
                 id="typo-nested"),
    pytest.param({"_sudoo": True},
                 "_sudoo: unknown key — not a rigkit or pyinfra key (did you mean '_sudo'?)",
                 id="typo-pyinfra-argument"),
    pytest.param({"gpu_power_limit_w": "420"},
                 "gpu_power_limit_w: '420' (str) — expected an integer", id="string-power-limit"),
    pytest.param({"gpu_power_limit_w": 0},
                 "gpu_power_limit_w: 0 (int) — must be greater than 0", id="zero-power-limit"),
    pytest.param({"vram_idle_mib": 0}, "vram_idle_mib: 0 (int) — must be greater than 0", id="zero-idle-ceiling"),
    pytest.param({"vram_idle_mib": 24576},
                 "vram_idle_mib: 24576 — not below the card's 24576 MiB (gpu_vram_gib 24 × 1024): every reading "
                 "would count as idle; a headless card reads a few MiB, a CUDA context ~250", id="idle-ceiling-the-whole-card"),
    pytest.param({"llama_swap": {"members": {"strata": {"idle_conn_s": 0}}}},
                 "llama_swap.members.strata.idle_conn_s: 0 (int) — must be greater than or equal to 1",
                 id="idle-conn-forever"),  # llama-swap's 0 keeps idle connections forever (issue #25)
    pytest.param({"llama_swap": {"members": {"strata": {"idle_conn_s": 5}}}},
                 "llama_swap.members.strata.idle_conn_s: 5 (int) — must be less than or equal to 4",
                 id="idle-conn-not-below-the-servers-keep-alive"),
    pytest.param({"gpu_power_limit_w": 450, "gpu_power_range_w": {"min_w": 100, "max_w": 400}},
                 "gpu_power_limit_w: 450 — outside the card's limits 100–400 W "
                 "(nvidia-smi power.min_limit/power.max_limit)", id="power-limit-out-of-range"),
    pytest.param({"llama_swap": {"groups": {"gpu": {"swap": False}}}},
                 "llama_swap.groups.gpu.swap: False — lets strata (21.6 GiB) + gguf-baseline (17.5 GiB) + "
                 "hyperqwen (22.08 GiB) run at once = 61.18 GiB > 23 GiB usable (gpu_vram_gib 24 − "
                 "vram_reserve_gib 1); set swap: true so at most one member of the group runs",
                 id="strata-and-hyperqwen-swap-false"),
    pytest.param({"llama_swap": {"groups": {"gpu": {"members": ["strata", "gguf-baseline"]},
                                            "hq": {"members": ["hyperqwen"], "exclusive": False}}}},
                 "llama_swap.groups: gpu, hq — lets strata (21.6 GiB) + hyperqwen (22.08 GiB) run at once = "
                 "43.68 GiB > 23 GiB usable (gpu_vram_gib 24 − vram_reserve_gib 1); put them in one group "
                 "with swap: true, or make the groups exclusive and not persistent (one big model at a time "
                 "fits in the card)", id="non-exclusive-group-co-resides"),
    pytest.param({"llama_swap": {"groups": {"gpu": {"members": ["strata", "gguf-baseline"], "persistent": True},
                                            "hq": {"members": ["hyperqwen"]}}}},
                 "llama_swap.groups: gpu, hq — lets strata (21.6 GiB) + hyperqwen (22.08 GiB) run at once = "
                 "43.68 GiB > 23 GiB usable (gpu_vram_gib 24 − vram_reserve_gib 1); put them in one group "
                 "with swap: true, or make the groups exclusive and not persistent (one big model at a time "
                 "fits in the card)", id="persistent-resident-group"),
    pytest.param({"hyperqwen": {"dflash_tokens": 15, "max_model_len": 32768}},
                 "hyperqwen.dflash_tokens: 15 — above 7 with max_model_len 32768 (≥ 16384) is refused: "
                 "DFLASH_TOKENS=15 crashed the engine at 20k context (EngineDeadError, marlin_gemm allocation "
                 "failure) and it kept answering 500; use ≤ 7, or set hyperqwen.allow_unsafe_spec: true",
                 id="dflash-15-at-32k"),
    pytest.param({"hyperqwen": {"port": 18030}},
                 "strata.port: 18030 — port 18030 already belongs to hyperqwen.port; a port has one owner (compared as an "
                 "integer (the kernel's bind))",
                 id="duplicate-port"),
    pytest.param({"llama_swap": {"members": {"coder2": {"cmd": "/usr/bin/llama-server --port 18050 -m /m.gguf",
                                                        "vram_gib": 1.0, "cold_boot_s": 5}}}},
                 "llama_swap.members.coder2.proxy: None — a fixed-port member (its cmd has no ${PORT}) must set "
                 "proxy, e.g. http://127.0.0.1:<port>; llama-swap's default http://localhost:${PORT} would point "
                 "elsewhere", id="member-without-proxy"),
    pytest.param({"llama_swap": {"members": {"coder2": {
                    "cmd": "docker run --rm --init --name coder2 img --port 18050",
                    "proxy": "http://127.0.0.1:18050", "vram_gib": 1.0, "cold_boot_s": 5}}}},
                 "llama_swap.members.coder2.cmd_stop: None — a container member needs cmdStop (e.g. docker stop "
                 "<name>): SIGTERM to the docker client does not stop the container, which then keeps the VRAM",
                 id="container-member-without-cmdstop"),
    pytest.param({"llama_swap": {"members": {"coder2": {
                    "cmd": "docker run -d --rm --name coder2 img", "cmd_stop": "docker stop coder2",
                    "proxy": "http://127.0.0.1:18050", "vram_gib": 1.0, "cold_boot_s": 5}}}},
                 "llama_swap.members.coder2.cmd: 'docker run -d --rm --name coder2 img' — runs detached (-d); cmd "
                 "must stay in the foreground and exit when the server dies, or llama-swap waits out "
                 "healthCheckTimeout on a dead member", id="detached-container-member"),
    pytest.param({"llama_swap": {"members": {"coder2": {
                    "cmd": "llama-server --port 18050 > /tmp/log", "proxy": "http://127.0.0.1:18050",
                    "vram_gib": 1.0, "cold_boot_s": 5}}}},
                 "llama_swap.members.coder2.cmd: 'llama-server --port 18050 > /tmp/log' — llama-swap runs cmd "
                 "without a shell, so ; && | > stay literal; wrap it in sh -c '...'", id="shell-redirect-in-cmd"),
    pytest.param({"pacman_pins": {**GOOD_PINS, "nvidia-open-dkms": "610.60-1"}},
                 "pacman_pins.nvidia-open-dkms: '610.60-1' — disagrees with nvidia_driver_version '610.57'; "
                 "pin nvidia-open-dkms at 610.57-<pkgrel> or 610.57.<n>-<pkgrel> (the full version, as the archive "
                 "names it)", id="pin-disagrees-with-driver"),
    pytest.param({"pacman_pins": {**GOOD_PINS, "nvidia-open-dkms": "610.60.02-1"}},
                 "pacman_pins.nvidia-open-dkms: '610.60.02-1' — disagrees with nvidia_driver_version '610.57'; "
                 "pin nvidia-open-dkms at 610.57-<pkgrel> or 610.57.<n>-<pkgrel> (the full version, as the archive "
                 "names it)", id="full-pin-of-another-series"),
    pytest.param({"nvidia_driver_version": "610.5", "pacman_pins": {**GOOD_PINS, "nvidia-open-dkms": "610.57.04-1",
                                                                     "nvidia-utils": "610.57.04-1",
                                                                     "opencl-nvidia": "610.57.04-1"}},
                 "pacman_pins.nvidia-open-dkms: '610.57.04-1' — disagrees with nvidia_driver_version '610.5'; "
                 "pin nvidia-open-dkms at 610.5-<pkgrel> or 610.5.<n>-<pkgrel> (the full version, as the archive "
                 "names it)", id="series-is-components-not-characters"),
    pytest.param({"nvidia_driver_version": "610.57.04", "pacman_pins": {**GOOD_PINS, "nvidia-open-dkms": "610.57.05-1",
                                                                         "nvidia-utils": "610.57.04-1",
                                                                         "opencl-nvidia": "610.57.04-1"}},
                 "pacman_pins.nvidia-open-dkms: '610.57.05-1' — disagrees with nvidia_driver_version '610.57.04'; "
                 "pin nvidia-open-dkms at 610.57.04-<pkgrel>", id="full-version-declared-other-full-pinned"),
    pytest.param({"pacman_pins": {**GOOD_PINS, "nvidia-open-dkms": "610.57.04-1", "nvidia-utils": "610.57.05-1",
                                  "opencl-nvidia": "610.57.04-2"}},
                 "pacman_pins.nvidia-utils: '610.57.05-1' — driver 610.57.05, but nvidia-open-dkms is pinned at "
                 "driver 610.57.04: the driver packages must be one driver (a module and a library of two drivers: "
                 "\"Driver/library version mismatch\")", id="driver-pins-of-two-drivers-in-one-series"),
    pytest.param({"nvidia_driver_version": "610.57-1"},
                 "nvidia_driver_version: '610.57-1' — not a version to declare: the series, e.g. "
                 "610.57, or the full version, e.g. 610.57.04 (dotted numbers, no pkgrel)", id="driver-with-pkgrel"),
    pytest.param({"cuda_version": "13"},
                 "cuda_version: '13' — not a version to declare: the series, e.g. 13.3 (dotted numbers, "
                 "no pkgrel)", id="cuda-without-minor"),
    pytest.param({"pacman_pins": {**GOOD_PINS, "cuda": "13.4.1-1"}},
                 "pacman_pins.cuda: '13.4.1-1' — not in the cuda_version '13.3' series (13.3.x-<pkgrel>)",
                 id="pin-disagrees-with-cuda"),
    pytest.param({"pacman_pins": {**GOOD_PINS, "nvidia-utils": "610.57"}},
                 "pacman_pins.nvidia-utils: '610.57' — a full pacman version [epoch:]pkgver-pkgrel, e.g. "
                 "'610.57.04-1' (pkgrel cannot be guessed)", id="pin-without-pkgrel"),
    pytest.param({"llama_swap": {"health_check_timeout_s": 120}},
                 "llama_swap.health_check_timeout_s: 120 — must cover the slowest cold boot x 1.5: hyperqwen "
                 "boots in 180 s, so ≥ 270 s", id="health-timeout-below-cold-boot"),
    pytest.param({"llama_swap": {"preload": ["strat"]}},
                 "llama_swap.preload[0]: 'strat' — not a member (did you mean 'strata'?); members: strata, "
                 "gguf-baseline, hyperqwen", id="preload-typo"),
    pytest.param({"llama_swap": {"preload": ["hyperqwen"]}},
                 "llama_swap.members.hyperqwen.ttl: 900 — a preloaded (resident) member keeps ttl 0, or it "
                 "unloads and nothing brings it back", id="preload-with-ttl"),
    pytest.param({"llama_swap": {"groups": {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwn"]}}}},
                 "llama_swap.groups.gpu.members[2]: 'hyperqwn' — not a member (did you mean 'hyperqwen'?); "
                 "members: strata, gguf-baseline, hyperqwen", id="group-member-typo"),
    pytest.param({"hyperqwen": {"image": {"registry": "ghcr.io"}}},
                 "hyperqwen.image.registry: 'ghcr.io' — the registry's base URL, https://HOST[:PORT] (its v2 API is under /v2/)",
                 id="image-registry-not-a-url"),
    pytest.param({"hyperqwen": {"extra_env": {"VLLM_API_KEY": "sk-do-not-print"}}},
                 "hyperqwen.extra_env.VLLM_API_KEY: <secret, not shown> — secrets never go in the spec: the API "
                 "key lives in /etc/rigkit/secrets/hyperqwen.env, the HF token comes from HF_TOKEN or the hf "
                 "token file", id="secret-in-extra-env"),
    pytest.param({"hyperqwen": {"spec": "eagle"}},
                 "hyperqwen.spec: 'eagle' (str) — expected one of 'dflash2' or 'mtp'", id="unknown-spec-mode"),
    pytest.param({"legacy_units": ["strata"]},
                 "legacy_units[0]: 'strata' — a systemd unit name: letters, digits and : _ . \\ @ -, ending in .service, "
                 ".timer, .socket, .path, .target or .mount, at most 255 bytes (systemd.unit(5), UNIT_NAME_MAX)", id="legacy-unit-name"),
    pytest.param({"operator_units": ["inventory/units/nope.timer"]},
                 "operator_units[0]: 'inventory/units/nope.timer' — no such file (relative to " + str(Path.cwd()) + ")",
                 id="operator-unit-missing"),
    pytest.param({"operator_units": ["inventory/units/llama-swap.service"]},
                 "operator_units[0]: 'inventory/units/llama-swap.service' — no such file (relative to "
                 + str(Path.cwd()) + ")", id="operator-unit-missing-2"),
    pytest.param({"paused_timers": ["agent-sync.service"]},
                 "paused_timers[0]: 'agent-sync.service' — a systemd timer unit name ending in .timer",
                 id="paused-timer-not-a-timer"),
]


@pytest.mark.parametrize(("data", "message"), BAD_INPUTS)
def test_bad_input_is_refused_with_its_message(data, message):
    assert message in problems_of(data)


def test_secret_value_never_appears_in_the_error():
    with pytest.raises(SpecError) as info:
        spec_from_dict({"hyperqwen": {"extra_env": {"VLLM_API_KEY": "sk-do-not-print"}}})
    assert "sk-do-not-print" not in str(info.value)


def test_unsafe_spec_is_allowed_when_asked_for():
    spec = spec_from_dict({"hyperqwen": {"dflash_tokens": 15, "max_model_len": 32768, "allow_unsafe_spec": True}})
    assert spec.hyperqwen.dflash_tokens == 15


def test_dflash_15_at_short_context_is_allowed():
    assert spec_from_dict({"hyperqwen": {"dflash_tokens": 15, "max_model_len": 8192}}).hyperqwen.dflash_tokens == 15


def test_every_problem_is_reported_at_once():
    problems = problems_of({"gpu_power_limit_w": "x", "gpu_vram_gb": 24})
    assert len(problems) == 2


_OWN = {"proxy": "http://127.0.0.1:18050", "vram_gib": 4.0, "cold_boot_s": 30, "cmd_stop": "docker stop mine"}


@pytest.mark.parametrize("cmd, warned", [
    ("docker run --rm --init --name mine img --port 18050", True),
    ("docker run --rm --init --name mine --label rigkit.member=mine img --port 18050", False),
    ("docker run --rm --init --name mine --label=rigkit.member=mine img --port 18050", False),
    ("docker run --rm --init --name mine -l rigkit.member=other img --port 18050", True),
])
def test_an_operators_container_without_rigkits_label_is_warned_about(cmd, warned):
    spec = spec_from_dict({"llama_swap": {"members": {"mine": {**_OWN, "cmd": cmd}},
                                          "groups": {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwen", "mine"]}}}})
    hits = [w for w in spec_warnings(spec) if w.key == "llama_swap.members.mine.cmd"]
    assert bool(hits) == warned
    if warned:
        assert "--label rigkit.member=mine" in str(hits[0])


def test_a_member_stop_longer_than_the_units_stop_timeout_is_refused():
    with pytest.raises(SpecError) as e:
        spec_from_dict({"llama_swap": {"members": {"gguf-baseline": {"unload_timeout_s": 41}}}})
    assert "llama_swap.members.gguf-baseline.unload_timeout_s: 41 — at most 40 s (llama_swap.stop_timeout_s 70" in str(e.value)
    spec_from_dict({"llama_swap": {"stop_timeout_s": 71, "members": {"gguf-baseline": {"unload_timeout_s": 41}}}})
