"""The deploy's preflight refusals (pure parts; the host-facing ones run in tests/harness)."""

from __future__ import annotations

import hashlib

from rigkit import paths
from rigkit.render.files import render
from rigkit.spec.validate import spec_from_dict
from rigkit.deploy.preflight import changed_models, disruptive_steps, refusals

PINS = {"nvidia-open-dkms": "610.57-1", "nvidia-utils": "610.57-1", "opencl-nvidia": "610.57-1", "cuda": "13.3.1-1"}
UNIT = f"{paths.UNIT_DIR}/llama-swap.service"
NO_WINDOW = {"exists": False, "data": None, "error": None}
NO_GPU = {"state": "missing", "message": "", "gpus": []}


def spec(**data):
    return spec_from_dict(data)


def sha256_of(files):
    return {p: hashlib.sha256(files[p].text.encode()).hexdigest() for p in (paths.LLAMA_SWAP_CONFIG, UNIT)}


def test_unset_operator_values_are_refused_by_name():
    out = refusals(spec(), NO_WINDOW, NO_GPU)
    assert "operator_user is unset (operator-supplied); set it in group_data or host data" in out
    # resolved by rigkit lock, never asked (the deploy refuses an unresolved one: rigkit.lockfile.view.lock_problems)
    assert not any(r.startswith(("pacman_pins", "llama_swap.release_sha256")) for r in out)


def test_power_limit_outside_the_cards_range_is_refused():
    smi = {"state": "ok", "message": "", "gpus": [{"index": 0, "power_min_w": 100.0, "power_max_w": 400.0}]}
    out = refusals(spec(pacman_pins=PINS), NO_WINDOW, smi)
    assert "gpu_power_limit_w 420 W is outside GPU 0's limits 100–400 W (nvidia-smi power.min_limit/power.max_limit)" in out


def test_an_open_window_is_refused_and_a_closed_one_is_not():
    open_ = {"exists": True, "data": {"state": "serving"}, "error": None}
    closed = {"exists": True, "data": {"state": "closed"}, "error": None}
    msg = ("a window is open (/var/lib/rigkit/window.json: state 'serving'); the deploy waits until the window has "
           "restored steady state")
    assert msg in refusals(spec(), open_, NO_GPU)
    assert not [r for r in refusals(spec(), closed, NO_GPU) if "window" in r]


def test_a_converged_host_has_no_disruptive_step():
    s = spec()
    files = render(s)
    daemon = {"exists": True, "data": {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
                                       "exec-opts": ["native.cgroupdriver=cgroupfs"], "log-driver": "journald"}}
    assert disruptive_steps(s, files, sha256_of(files), daemon, proxy_running=True) == []


def test_a_config_change_while_the_proxy_runs_is_disruptive_and_refused_under_traffic_or_a_lock():
    s = spec(llama_swap={"health_check_timeout_s": 330})
    old = render(spec())
    steps = disruptive_steps(s, render(s), sha256_of(old), {"exists": False}, proxy_running=True)
    assert steps == ["/etc/llama-swap/config.yaml changes: llama-swap restarts"]
    busy = {"port": 8080, "locks": ["/run/agent/session.lock"], "clients": ["127.0.0.1:51234"]}
    out = refusals(s, NO_WINDOW, NO_GPU, steps, busy)
    assert ("this run would interrupt service (/etc/llama-swap/config.yaml changes: llama-swap restarts) but lock "
            "file(s) present: /run/agent/session.lock (a session holds the GPU); llama-swap (:8080) has 1 established "
            "client connection(s), from 127.0.0.1:51234; run again when the rig is idle, or pass --force") in out
    assert not [r for r in refusals(s, NO_WINDOW, NO_GPU, steps, {"port": 8080, "locks": [], "clients": []})
                if "interrupt" in r]
    forced = spec(llama_swap={"health_check_timeout_s": 330}, force=True)
    assert not [r for r in refusals(forced, NO_WINDOW, NO_GPU, steps, busy) if "interrupt" in r]


def test_nothing_runs_yet_so_a_fresh_host_is_not_disrupted():
    s = spec()
    assert disruptive_steps(s, render(s), {}, {"exists": False}, proxy_running=False) == []


def test_a_held_config_is_not_a_disruption_the_deploy_will_not_activate_it():
    s = spec(llama_swap={"health_check_timeout_s": 330})
    old = render(spec())
    assert disruptive_steps(s, render(s), sha256_of(old), {"exists": False}, proxy_running=True, held=True) == []


def test_the_live_config_is_compared_one_way():
    """The preflight and the activation compare the live config by sha256 through one function; no
    module reads a file's sha1 to compare it (issue #26)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    users = []
    for path in sorted((root / "rigkit").rglob("*.py")) + sorted((root / "roles").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "Sha1File":
                users.append(str(path.relative_to(root)))
    assert not users


def test_new_weights_under_a_running_proxy_are_a_disruption():
    """A lock that changes a model's entry fetches its files anew, and llama-swap restarts once they are
    (roles/llama_swap.py: a member would go on serving the old copy): disruptive while the proxy runs, so
    refused under traffic or a declared lock file like any restart. A model new to the lock restarts nothing
    (no member serves it yet), nor does a first lock."""
    s = spec()
    files = render(s)
    old = {"models": {"strata": {"commit": "a" * 40}, "gguf-baseline": {"commit": "b" * 40}}}
    new = {"models": {"strata": {"commit": "c" * 40}, "gguf-baseline": {"commit": "b" * 40}, "extra": {"commit": "d" * 40}}}
    assert changed_models(old, new) == ["strata"]
    assert changed_models(None, new) == [] and changed_models(old, old) == []
    steps = disruptive_steps(s, files, sha256_of(files), {"exists": False}, proxy_running=True,
                             models_changed=changed_models(old, new))
    assert steps == ["new weights for strata (the lock changes them): llama-swap restarts once they are fetched"]
    assert disruptive_steps(s, files, sha256_of(files), {"exists": False}, proxy_running=False,
                            models_changed=["strata"]) == []
