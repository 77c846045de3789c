"""An operator's year on the box (issue 63): the whole journey on a lived-in copy of the converged host.

The copy gets the operator's real files (``lived_in`` in tests/unit/data/owner_corpus.json, each cited
by repository, path and commit, written byte for byte): a pacman.conf whose repository sections
``Include`` two mirrorlists (and whose ``[options]`` holds its own ``IgnorePkg``) with those
mirrorlists, and at its bottom the ``Include = /etc/pacman.d/*.conf`` glob whose file opens a repository
of its own (TuxLAVA's Arch install page, followed as written), two mkinitcpio presets of kernels of its own (an image preset with a microcode glob, a
UKI preset) and a ``MODULES+=`` drop-in without a final newline, a daemon.json of its own keys without
a final newline, a unit of its own and its hourly timer, and a user crontab. Adapted to the rig, and only
this: the unit's ``/usr/bin/btrbk`` exists only on the operator's box, so the host gets a script of
that name; a drop-in makes the unit ``Wants=``/``After=`` llama-swap (the unit then calls what the
rig serves), so its timer is declared in ``paused_timers`` as docs/operating.md asks; the crontab
gets one line calling the proxy (no public crontab found calls llama-swap's port). The models folder
holds files rigkit does not manage. The operator's own llama-swap member is llama-swap's own Docker
example (v250 ``config.example.yaml`` ``docker-llama``: ``--name ${MODEL_ID}``, ``docker stop
${MODEL_ID}``), declared live, adapted to the rig's models folder, image and loopback port.

The journey, as the operator runs it, every command with the same declared data: ``rigkit check``,
``rigkit deploy`` (its own lock is not needed: ``rigkit lock`` resolves pins, images, the release and
the models, and nothing here changes them — the deploy refuses a lock that does not resolve the spec,
so its passing shows the sandbox's lock does), ``rigkit wire-in`` show/activate/rollback/release, a
window with its bench (its preflight warns about the crontab line; the operator's timer paused and
resumed), ``rigkit rollback --to 1`` and its release, the deploy again, ``rigkit drift``. No command
refuses; every operator file's sha256 is the same before and after, but pacman.conf, which gains
rigkit's one documented line, and daemon.json, whose keys rigkit merges (every operator key kept
with its value; the operator's bytes kept in the backup the deploy names); the operator's timers
active again; drift clean.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

CORPUS = json.loads((ROOT / "tests" / "unit" / "data" / "owner_corpus.json").read_text())["lived_in"]
FILES = {e["host_path"]: e["text"] + e.get("adapted_append", "") for e in CORPUS}
#: what this module adds to the real files, each for the reason the module docstring gives
ADAPTED = {
    "/usr/bin/btrbk": "#!/bin/sh\n# stands in for btrbk, which exists only on the operator's box (backup.service calls it)\nexit 0\n",
    "/etc/systemd/system/backup.service.d/50-llama-swap.conf": "[Unit]\nWants=llama-swap.service\nAfter=llama-swap.service\n",
}
#: the models folder's files rigkit does not manage
MODELS = {
    "/srv/models/operator-archive/Meta-Llama-3-8B-Instruct.Q4_K_M.gguf": "GGUF an old model the operator keeps\n",
    "/srv/models/NOTES.txt": "which model is where: ask the operator\n",
}
OPERATOR_FILES = {**FILES, **ADAPTED, **MODELS}
PACMAN_CONF, DAEMON_JSON, CRONTAB = "/etc/pacman.conf", "/etc/docker/daemon.json", "/var/spool/cron/rig"
TIMERS = ["agent-sync.timer", "backup.timer"]
UPSTREAM = yaml.safe_load((ROOT / "tests" / "unit" / "data" / "llama_swap" / "config.example.yaml").read_text())


def own_member() -> dict:
    """The operator's member: llama-swap's own Docker example (v250 config.example.yaml ``docker-llama``)
    as copied into their config, adapted where the rig differs: the models folder, the rig's llama.cpp
    image by its digest, and the port published on loopback (rigkit refuses ``-p ${PORT}:8080``, which
    publishes on every interface, naming this fix)."""
    ex = UPSTREAM["models"]["docker-llama"]
    digest = json.loads((hostctl.fixtures_www() / "images.json").read_text())["ghcr.io/ggml-org/llama.cpp"]
    cmd = (ex["cmd"].replace("/mnt/nvme/models", "/srv/models/strata")
           .replace("ghcr.io/ggml-org/llama.cpp:server", f"ghcr.io/ggml-org/llama.cpp@{digest}")
           .replace("-p ${PORT}:8080", "-p 127.0.0.1:${PORT}:8080")
           .replace("Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf", "strata-coder-Q4_K_M.gguf"))
    return {"cmd": cmd, "cmd_stop": ex["cmdStop"], "proxy": ex["proxy"], "staged": False,
            "cold_boot_s": 60, "vram_gib": 1.0, "ttl": 300, "name": "docker-llama (llama-swap's example)"}


def declared() -> dict:
    """What every command of the journey declares beside the sandbox: the sandbox's timer and the
    operator's own in ``paused_timers``, and the operator's own llama-swap member (read once the
    fixtures, whose images.json names the digest, are up)."""
    return {"paused_timers": TIMERS, "llama_swap": {"members": {"docker-llama": own_member()}}}


FLIP = 'llama_swap={"members": {"hyperqwen": {"staged": false}}}'
PINS_INCLUDE = "Include = /etc/rigkit/pacman-pins.conf\n"


def rigkit(host, *args, timeout: float = 900):
    return sandbox_project.rigkit(host, *args, timeout=timeout, data=declared())


def sha(host) -> dict[str, str]:
    out = host.run("sha256sum " + " ".join(shlex.quote(p) for p in sorted(OPERATOR_FILES))).stdout.split()
    return dict(zip(out[1::2], out[0::2]))


def active(host, *units: str) -> list[str]:
    return host.run("systemctl is-active " + " ".join(units), check=False).stdout.split()


def put(host, path: str, text: str, mode: str = "0644", owner: str = "root:root") -> None:
    """Write ``text`` byte for byte (no newline added: the real files end as they end)."""
    b64 = base64.b64encode(text.encode()).decode()
    host.run(f"mkdir -p {shlex.quote(str(Path(path).parent))} && printf %s {b64} | base64 -d > {shlex.quote(path)} && "
             f"chmod {mode} {shlex.quote(path)} && chown {owner} {shlex.quote(path)}")


@pytest.fixture(scope="module")
def host(make_module_host):
    """The converged copy with the operator's year on it; ``host.before`` their files' sha256."""
    h = make_module_host("li", converged=True)
    for path, text in OPERATOR_FILES.items():
        mode = "0755" if path == "/usr/bin/btrbk" else "0600" if path == CRONTAB else "0644"
        put(h, path, text, mode=mode, owner="rig:rig" if path == CRONTAB else "root:root")
    h.run("systemctl daemon-reload && systemctl enable --now backup.timer")
    h.builds = h.run("cat /var/lib/fake-mkinitcpio/builds.jsonl 2>/dev/null || true").stdout
    h.before = sha(h)
    assert set(h.before) == set(OPERATOR_FILES)
    # the premises: pacman follows the operator's Include chain, the unit wants llama-swap, both timers run
    # ... the glob at the bottom (in [extra], the last section open) brings tuxlava.conf's own section
    assert h.run("pacman-conf --repo-list").stdout.split() == ["garuda", "wayland", "archcraft", "core", "extra", "tuxpkg"]
    assert "https://cdn-mirror.chaotic.cx/garuda/x86_64" in h.run("pacman-conf --repo garuda Server").stdout
    assert "llama-swap.service" in h.run("systemctl show -p Wants --value backup.service").stdout
    assert active(h, *TIMERS) == ["active", "active"]
    return h


def test_check_passes_on_the_declared_data(host):
    proc = rigkit(host, "check", "-i", "inventory/sandbox.py")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # upstream's example has no rigkit.member label: a warning (an orphan after a killed proxy), not a refusal
    assert "warn  llama_swap.members.docker-llama.cmd: runs container 'docker-llama' without --label" in proc.stdout + proc.stderr


def test_the_deploy_keeps_every_operator_byte_but_its_one_line_and_daemon_jsons_merged_keys(host):
    pacman_before = host.run(f"cat {PACMAN_CONF}").stdout
    proc = rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--full", "--no-smoke")
    assert proc.returncode == 0, proc.stderr[-6000:]
    log = host.run("cat /var/lib/rigkit/activate.log").stdout
    assert "completion to docker-llama (its definition changed)" in log, log[-3000:]  # the operator's member answered
    after = host.run(f"cat {PACMAN_CONF}").stdout.splitlines(keepends=True)
    assert [ln for ln in after if ln != PINS_INCLUDE] == pacman_before.splitlines(keepends=True)
    assert after.count(PINS_INCLUDE) == 1 and after.index(PINS_INCLUDE) == after.index("[options]\n") + 1
    held = set(host.run("pacman-conf IgnorePkg").stdout.split())
    assert {"ffmpeg", "expressvpn", "nvidia-utils", "cuda"} <= held, held  # the operator's and rigkit's pins
    merged = json.loads(host.run(f"cat {DAEMON_JSON}").stdout)
    assert merged["log-opts"] == {"max-size": "10m", "max-file": "2"}  # the operator's key and value
    assert "native.cgroupdriver=cgroupfs" in merged["exec-opts"] and "nvidia" in merged["runtimes"]
    backup = re.search(r"(/etc/docker/daemon\.json\.rigkit-bak-\d{8}T\d{6}Z)", proc.stderr)
    assert backup, proc.stderr[-4000:]
    assert host.run(f"cat {backup.group(1)}").stdout == FILES[DAEMON_JSON]  # the operator's bytes, kept
    assert host.run("docker info --format '{{.CgroupDriver}} {{.LoggingDriver}}'").stdout.split() == ["cgroupfs", "json-file"]
    assert active(host, *TIMERS) == ["active", "active"]


def test_wire_in_show_activate_rollback_release(host):
    shown = rigkit(host, "wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--show", "--data", FLIP)
    assert shown.returncode == 3, shown.stdout[-3000:] + shown.stderr[-3000:]
    # --data is merged into the declared members, not over them: the operator's member stays (deep merge)
    assert f"{host.name}: members added: hyperqwen; " in shown.stdout, shown.stdout[-3000:]
    on = rigkit(host, "wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--activate", "--data", FLIP)
    assert on.returncode == 0, on.stdout[-3000:] + on.stderr[-3000:]
    assert '"hyperqwen":' in host.run("cat /etc/llama-swap/config.yaml").stdout
    back = rigkit(host, "wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--rollback")
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    released = rigkit(host, "wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--release")
    assert released.returncode == 0 and "released the hold" in released.stdout, released.stdout + released.stderr
    assert '"hyperqwen":' not in host.run("cat /etc/llama-swap/config.yaml").stdout


def test_a_window_warns_about_the_crontab_pauses_the_operators_timer_and_resumes_it(host):
    out = tempfile.mkdtemp(prefix="rk63-results-")
    proc = rigkit(host, "window", "-i", "inventory/sandbox.py", "--bench", "small", "--out", out, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    text = " ".join((proc.stdout + proc.stderr).split())
    assert ("warning: cron calls the proxy, and cron is not paused (rigkit never edits a crontab): "
            f"rig's crontab ({CRONTAB}) line 8: curl -s http://127.0.0.1:8080/v1/models > /dev/null") in text, text[-3000:]
    journal = json.loads(host.run("cat /var/lib/rigkit/window.json").stdout)
    assert sorted(journal["timers_active_before"]) == TIMERS  # both paused ...
    assert active(host, *TIMERS) == ["active", "active"]  # ... and resumed
    assert any("cron calls the proxy" in n for n in journal.get("notes") or [])


def test_rollback_to_1_and_release(host):
    proc = rigkit(host, "rollback", "-i", "inventory/sandbox.py", "--host", host.name, "--to", "1", "--no-smoke")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rel = rigkit(host, "rollback", "-i", "inventory/sandbox.py", "--host", host.name, "--release")
    assert rel.returncode == 0, rel.stdout + rel.stderr


def test_the_deploy_again_then_drift_is_clean_and_the_operators_files_are_as_they_were(host):
    proc = rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--no-smoke")
    assert proc.returncode == 0, proc.stderr[-6000:]
    drift = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--json")
    records = [json.loads(ln) for ln in drift.stdout.splitlines() if ln.strip()]
    findings = [r for r in records if r["kind"] not in ("status", "run")]
    assert (drift.returncode, findings) == (0, []), drift.stdout[-4000:] + drift.stderr[-2000:]
    after = sha(host)
    changed = sorted(p for p in after if after[p] != host.before[p])
    assert changed == [DAEMON_JSON, PACMAN_CONF], changed
    # nothing of the operator's left paused or stopped, no window unit left
    assert active(host, *TIMERS, "llama-swap.service") == ["active", "active", "active"]
    assert active(host, "rigkit-window.service", "hyperqwen.service") == ["inactive", "inactive"]
    # the operator's presets and drop-in leave the effective HOOKS as they were: nothing rebuilt
    assert host.run("cat /var/lib/fake-mkinitcpio/builds.jsonl 2>/dev/null || true").stdout == host.builds
    print("lived-in operator files, sha256 before -> after:")
    for p in sorted(after):
        print(f"  {p}: {host.before[p][:16]} -> {after[p][:16]}{'  (changed)' if p in changed else ''}")
