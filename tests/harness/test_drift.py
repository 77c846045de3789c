"""``rigkit drift`` against a deployed sandbox host (tests/harness): a converged host has no drift;
each kind of drift, injected by hand alone, is found and named with declared vs actual, then put
back; a fleet with an unreachable host; JSON records; no secret in any output.

One host (``<prefix>dr1``) is deployed once for the module with the sandbox hub's token as HF_TOKEN
(so ``hf.env`` is installed and compared by hash). Every check runs the probe only (~1 s), as
``rigkit drift`` does by default; one test (:func:`test_the_probe_agrees_with_the_plan`) runs
pyinfra's plan (``--plan``) twice: on the converged host, and on a batch of breakages from the
coverage table (tests/harness/drift_agreement.py). Note: the probe compares the agent's wheelhouse
with the one this checkout builds — a change to ``rigkit/host/`` between the deploy and a check
shows up as ``agent-wheelhouse`` (real drift), and in the plan as ``Host agent | Sync the agent
wheelhouse``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "harness"
sys.path.insert(0, str(HARNESS))
import drift_agreement  # noqa: E402
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

from rigkit.drift import coverage  # noqa: E402

PROJECT = sandbox_project.cwd()  # the tests' own group_data, never the operator's (sandbox_project.py)

NAME = os.environ.get("RIGKIT_HARNESS_PREFIX", "rkt-") + "dr1"  # what make_module_host("dr1") names it
CONFIG = "/etc/llama-swap/config.yaml"
ENV_FILE = "/opt/rigkit/hyperqwen/.env"
CANARY = "hf_DriftCanary0000RecognisableTokenValue"


@pytest.fixture(scope="module")
def rig(make_module_host):
    """A copy of the run's converged host; removed after the module."""
    host = make_module_host("dr1", converged=True)
    assert host.name == NAME
    host.agent_digest = _agent_digest()  # the golden copy's key covers rigkit/: a later edit counts as a change
    return host


def _agent_digest() -> str:
    from rigkit.render import wheelhouse

    return wheelhouse._source_digest()


def agent_source_changed(rig) -> bool:
    """Other work in this checkout may edit ``rigkit/`` while the module runs; the agent's
    wheelhouse is built from it, so the plan then rightly says the agent would be re-synced."""
    return _agent_digest() != rig.agent_digest


def without_agent_resync(rig, records: list[dict]) -> list[dict]:
    """``records`` minus the agent's re-sync (the probe's ``agent-wheelhouse``, the plan's
    ``Host agent | ...``), only when the checkout's ``rigkit/`` changed since the deploy."""
    if not agent_source_changed(rig):
        return records
    return [r for r in records if not (r["kind"] == "agent-wheelhouse" or
                                       (r["kind"].startswith("plan") and r["item"].startswith("Host agent | ")))]


def drift(*args: str, token: str | None = None, host: str = NAME, inventory: str = "inventory/sandbox.py",
          plan: bool = False) -> tuple[int, list[dict], str]:
    """Run ``python -m rigkit drift --json`` (a subprocess: pyinfra's CLI gevent-patches the
    process). Returns (exit code, records, stdout + stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME")}
    env.update(RIGKIT_SANDBOX_HOST=host, HF_TOKEN=token or hostctl.hub_token(), HF_HOME="/nonexistent-hf-home")
    cmd = [sys.executable, "-m", "rigkit", "drift", "-i", inventory, "--json", *args]
    if plan:
        cmd.append("--plan")
    proc = subprocess.run(cmd, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    # the document's per-host status and run records follow the findings (drift --json)
    records = [r for r in records if r.get("kind") not in ("status", "run")]
    return proc.returncode, records, proc.stdout + proc.stderr


def drifted(records: list[dict]) -> set[tuple[str, str]]:
    return {(r["kind"], r["item"]) for r in records if r["severity"] == "drift"}


def one(records: list[dict], kind: str, item: str) -> dict:
    hits = [r for r in records if r["kind"] == kind and r["item"] == item]
    assert len(hits) == 1, records
    return hits[0]


def no_secret(output: str) -> None:
    assert hostctl.hub_token() not in output
    assert CANARY not in output


def test_converged_host_has_no_drift(rig):
    rc, records, out = drift()
    assert [r for r in without_agent_resync(rig, records) if r["severity"] != "warn"] == []
    assert not [r for r in records if r["kind"] == "plan"], "the plan runs only with --plan"
    assert rc == (3 if agent_source_changed(rig) else 0), out
    no_secret(out)
    rc, _, out = drift("--deep")
    assert rc == 0, out


def test_table_output_without_a_terminal_has_no_colour(rig):
    env = {**os.environ, "RIGKIT_SANDBOX_HOST": NAME, "HF_TOKEN": hostctl.hub_token()}
    proc = subprocess.run([sys.executable, "-m", "rigkit", "drift", "-i", "inventory/sandbox.py"],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    # read the words (how the lines break is test_plain_output's and the next test's)
    text = " ".join(proc.stdout.split())
    assert re.fullmatch(rf"{NAME}: generation \d+ \(\S+Z, rig, deploy\); compared with the spec {NAME}: no drift",
                        text), proc.stdout
    assert "\x1b[" not in proc.stdout + proc.stderr


def test_edited_live_config_is_found_with_a_masked_diff(rig):
    rig.run(f"cp -a {CONFIG} /root/config.yaml.orig && echo '# HF_TOKEN={hostctl.hub_token()}' >> {CONFIG}")
    try:
        rc, records, out = drift("--diff")
        assert rc == 3, out
        no_secret(out)
        content = one(records, "file", CONFIG)
        assert content["declared"].startswith("content sha256:") and content["actual"].startswith("content sha256:")
        assert "+# HF_TOKEN=***" in content["diff"]
        assert ("llama-swap-live", CONFIG) in drifted(records)
        assert {k for k, _ in drifted(without_agent_resync(rig, records))} == {"file", "llama-swap-live"}
    finally:
        rig.run(f"cp -a /root/config.yaml.orig {CONFIG}")
    assert drift()[0] == 0


def test_mode_and_owner_change(rig):
    rig.run(f"chmod 0644 {ENV_FILE} && chown root:root {ENV_FILE}")
    try:
        rc, records, out = drift()
        assert rc == 3, out
        assert drifted(records) == {("file-mode", ENV_FILE), ("file-owner", ENV_FILE)}
        assert (one(records, "file-mode", ENV_FILE)["declared"], one(records, "file-mode", ENV_FILE)["actual"]) == \
            ("0640", "0644")
        assert one(records, "file-owner", ENV_FILE)["actual"] == "root:root"
    finally:
        rig.run(f"chown root:llama-swap {ENV_FILE} && chmod 0640 {ENV_FILE}")
    assert drift()[0] == 0


def _archive(pkg: str, version: str) -> str:
    return f"{hostctl.MANIFEST['archive_url']}/{pkg[0]}/{pkg}/{pkg}-{version}-x86_64.pkg.tar.zst"


def test_driver_upgraded_past_the_pin(rig):
    pinned = hostctl.MANIFEST["pins"]["nvidia-utils"]
    rig.run(f"pacman -Udd --noconfirm {_archive('nvidia-utils', '610.60.02-1')}")
    try:
        rc, records, out = drift()
        assert rc == 3, out
        assert drifted(records) == {("pin", "nvidia-utils"), ("driver", "pacman -Q nvidia-utils"), ("driver", "nvidia-smi")}
        pin = one(records, "pin", "nvidia-utils")
        assert (pin["declared"], pin["actual"]) == (pinned, "610.60.02-1")
        assert "mismatch" in one(records, "driver", "nvidia-smi")["actual"]
    finally:
        rig.run(f"pacman -Udd --noconfirm {_archive('nvidia-utils', pinned)}")
    assert drift()[0] == 0


def test_ignorepkg_removed(rig):
    """rigkit's Include line commented out: pacman-conf no longer holds the pins."""
    rig.run("cp -a /etc/pacman.conf /root/pacman.conf.orig && "
            "sed -i 's|^Include = /etc/rigkit/pacman-pins.conf|#&|' /etc/pacman.conf")
    try:
        rc, records, out = drift()
        assert rc == 3, out
        assert drifted(records) == {("pin-held", p) for p in hostctl.MANIFEST["pins"]}
    finally:
        rig.run("cp -a /root/pacman.conf.orig /etc/pacman.conf")
    assert drift()[0] == 0


def test_power_limit_changed(rig):
    """Under the host lock (``lock hold``): the power-limit healer (rigkit-power.timer) stands down
    while it is held, so the limit set by hand stays for drift to see; the held lock is a warning."""
    holder = "sleep 300 | /opt/rigkit/venv/bin/rigkit-agent lock hold --what 'test: power drift' --lease t-drift"
    rig.run(f"systemd-run --unit=rk-test-hold --collect sh -c {shlex.quote(holder)}")
    try:
        rig.wait_lock_held_by("test: power drift")  # held by this test's holder, not a timer's run
        rig.run("nvidia-smi -pl 300")
        rc, records, out = drift()
        assert rc == 3, out
        assert drifted(records) == {("power", "GPU 0 enforced.power.limit"), ("power", "GPU 0 power.limit")}
        enforced = one(records, "power", "GPU 0 enforced.power.limit")
        assert (enforced["declared"], enforced["actual"]) == ("420 W", "300 W")
        assert one(records, "lock", "/var/lib/rigkit/rig.lock")["severity"] == "warn"
    finally:
        rig.run("nvidia-smi -pl 420")
        rig.release_test_lock("rk-test-hold.service")
    assert drift()[0] == 0


def test_daemon_json_runtime_removed_but_a_foreign_key_is_not_drift(rig):
    rig.run("cp -a /etc/docker/daemon.json /root/daemon.json.orig")
    try:
        rig.run("python3 -c \"import json; p='/etc/docker/daemon.json'; d=json.load(open(p)); "
                "d['log-level']='warn'; json.dump(d, open(p, 'w'), indent=4)\"")
        assert drift()[0] == 0
        rig.run("python3 -c \"import json; p='/etc/docker/daemon.json'; d=json.load(open(p)); "
                "d.pop('runtimes'); json.dump(d, open(p, 'w'), indent=4)\"")
        rc, records, out = drift()
        assert rc == 3, out
        assert drifted(records) == {("daemon.json", "runtimes")}
        assert one(records, "daemon.json", "runtimes")["actual"] == "absent"
        assert json.loads(one(records, "daemon.json", "runtimes")["declared"])["nvidia"]["path"] == "nvidia-container-runtime"
    finally:
        rig.run("cp -a /root/daemon.json.orig /etc/docker/daemon.json")


def test_llama_swap_disabled(rig):
    rig.run("systemctl disable llama-swap.service")
    try:
        rc, records, out = drift()
        assert rc == 3, out
        assert drifted(records) == {("unit", "llama-swap.service")}
        r = one(records, "unit", "llama-swap.service")
        assert (r["declared"], r["actual"]) == ("enabled", "disabled")
    finally:
        rig.run("systemctl enable llama-swap.service")
    assert drift()[0] == 0


def test_strata_back_with_requires(rig):
    # the converged host's legacy unit (disabled) and its backup (golden.BEFORE_FIRST_DEPLOY), kept
    # aside: without the backup, drift must say it is missing too
    rig.run("cp -a /etc/systemd/system/strata.service /root/strata.unit && "
            "mv /var/lib/rigkit/legacy-units/strata.service /root/strata.backup")
    rig.write("/etc/systemd/system/strata.service", textwrap.dedent("""\
        [Unit]
        Description=legacy Strata, back by hand
        [Service]
        ExecStart=/bin/sleep infinity
        [Install]
        WantedBy=multi-user.target"""))
    rig.write("/etc/systemd/system/llama-swap.service.d/50-strata.conf", "[Unit]\nRequires=strata.service")
    rig.run("systemctl daemon-reload && systemctl enable --now strata.service")
    try:
        rc, records, out = drift()
        assert rc == 3, out
        assert drifted(records) == {("legacy-unit", "strata.service"), ("legacy-unit", "strata.service backup"),
                                    ("unit-dependency", "llama-swap.service Requires=strata.service")}
        assert one(records, "legacy-unit", "strata.service")["actual"] == "enabled, active"
    finally:
        rig.run("rm -rf /etc/systemd/system/llama-swap.service.d && systemctl daemon-reload && "
                "systemctl disable --now strata.service && mv /root/strata.unit /etc/systemd/system/strata.service && "
                "mv /root/strata.backup /var/lib/rigkit/legacy-units/strata.service && "
                "systemctl daemon-reload && systemctl start llama-swap.service")
    assert drift()[0] == 0


def test_agent_venv_python_removed(rig):
    try:  # the move inside: a move that half failed is put back too (python3.X: the host's own Python)
        rig.run("mkdir -p /root/venv-bin && mv /opt/rigkit/venv/bin/python /opt/rigkit/venv/bin/python3 "
                "/opt/rigkit/venv/bin/python3.[0-9]* /root/venv-bin/")
        rc, records, out = drift()
        assert rc == 3, out
        assert drifted(records) == {("agent", "/opt/rigkit/venv/bin/rigkit-agent")}
        assert one(records, "agent", "/opt/rigkit/venv/bin/rigkit-agent")["actual"].startswith("exit 12")
        assert [(r["item"], r["actual"], r["severity"]) for r in records if r["kind"] == "not-compared"] == [
            ("models", "the host agent does not run (kind agent); not checked", "warn")]
    finally:
        rig.run("mv /root/venv-bin/* /opt/rigkit/venv/bin/ 2>/dev/null; true")
    assert drift()[0] == 0


MODEL_FILE = "/srv/models/hyperqwen/Qwen3.8-27B-W4A16-AutoRound/model-00002-of-00002.safetensors"


def test_truncated_model_file_and_same_size_corruption_with_deep(rig):
    """HyperQwen's weights (not loaded in steady state, so nothing has them mapped)."""
    rig.run(f"cp -a {MODEL_FILE} /root/model.orig")
    try:
        rig.run(f"truncate -s 100 {MODEL_FILE}")
        rc, records, out = drift()
        assert rc == 3, out
        models = [r for r in records if r["kind"] == "model"]
        assert models and all("model-00002-of-00002.safetensors" in r["actual"] for r in models), models
        assert {k for k, _ in drifted(records)} == {"model"}
        rig.run(f"cp -a /root/model.orig {MODEL_FILE} && "
                f"printf 'XXXXXXXX' | dd of={MODEL_FILE} bs=1 seek=64 conv=notrunc status=none && "
                f"touch -r /root/model.orig {MODEL_FILE}")
        assert drift()[0] == 0  # same size and mtime: only hashing sees it
        rc, records, out = drift("--deep")
        assert rc == 3, out
        assert any("content differs from the record (sha256)" in r["actual"] for r in records if r["kind"] == "model")
    finally:
        rig.run(f"cp -a /root/model.orig {MODEL_FILE}")
    assert drift("--deep")[0] == 0


def test_secret_differs_from_the_token_at_hand_never_shown(rig):
    rc, records, out = drift(token=CANARY)
    assert rc == 3, out
    assert drifted(records) == {("secret", "/etc/rigkit/secrets/hf.env")}
    r = one(records, "secret", "/etc/rigkit/secrets/hf.env")
    assert r["declared"] == "the value from environment variable HF_TOKEN"
    no_secret(out)


def test_fleet_with_an_unreachable_host(rig, tmp_path):
    inventory = tmp_path / "fleet.py"
    inventory.write_text(textwrap.dedent(f"""\
        import runpy
        _ns = runpy.run_path({str(ROOT / 'inventory' / 'sandbox.py')!r})
        _name, _data = _ns["sandbox"][0]
        # the same host's address, a port nothing listens on: refused at once
        fleet = [(_name, _data), ("rkd-gone", {{**_data, "ssh_port": 1}})]
        """))
    rc, records, out = drift(inventory=str(inventory))
    assert rc == 1, out
    gone = [r for r in records if r["host"] == "rkd-gone"]
    assert [(r["kind"], r["severity"]) for r in gone] == [("host", "error")]
    assert "unreachable" in gone[0]["actual"]
    mine = without_agent_resync(rig, [r for r in records if r["host"] == NAME])
    assert [r for r in mine if r["severity"] != "warn"] == []  # still checked, and converged
    assert any(r["kind"] == "model" for r in records if r["host"] == NAME) is False
    no_secret(out)


#: The suite's sample of the coverage table: independent breakages of many kinds (folders, file
#: content and mode, secrets, accounts, the release binary, the wheelhouse, daemon.json, units and
#: timers, mkinitcpio, the power limit, a repo package, IgnorePkg, the uploads), one batch.
SAMPLE = (
    ("hyperqwen", "Create HyperQwen's compose directory"),
    ("llama_swap", "Install llama-swap.service"),
    ("llama_swap", "Install the staged llama-swap config for review"),
    ("llama_swap", "Upload the declared live llama-swap config for activation"),
    ("llama_swap", "Install llama-swap {ls.version} from its pinned release tarball"),
    ("secrets", "Generate HyperQwen's VLLM_API_KEY once on the host"),
    ("secrets", "Create the {user} system user"),
    ("docker", "Put {spec.operator_user} in the docker group"),
    ("docker", "Merge the nvidia runtime and the cgroup mitigation into daemon.json"),
    ("agent", "Sync the agent wheelhouse"),
    ("agent", "Enable and start {stem}.timer"),
    ("power", "Enable gpu-power-limit.service"),
    ("power", "Set the GPU power limit to {spec.gpu_power_limit_w} W"),
    ("boot", "Keep the kms hook out of mkinitcpio's HOOKS (rigkit's drop-in)"),
    ("pins", "Install docker, compose, buildx and the NVIDIA container toolkit (pacman -Syu --needed)"),
    ("pins", "Hold the pinned packages: Include rigkit's pins file from [options]"),
    ("models", "Install the model lock"),
)


def test_the_probe_agrees_with_the_plan(rig):
    """Drift without the plan reports something exactly when ``pyinfra --dry`` would change something:
    on the converged host (both empty), and on one batch of independent breakages from the coverage
    table (each breakage's findings reported, each one's operation in the plan, nothing else in
    either). The whole table: benchmarks/drift_coverage.py."""
    if agent_source_changed(rig):
        pytest.skip("rigkit/ changed since the golden deploy: the wheelhouse differs on both sides")
    clean = drift_agreement.converged(rig, PROJECT)
    assert clean.problems == [] and clean.exit_code == 0, clean.output
    rows = [coverage.row_for(role, op) for role, op in SAMPLE]
    batch = drift_agreement.run_batch(rig, rows, PROJECT)
    assert batch.problems == [], "\n".join(batch.problems) + "\n" + batch.output[-3000:]
    assert batch.exit_code == 3
    no_secret(batch.output)
    assert drift()[0] == 0  # all put back


def _plain_drift(*args: str) -> subprocess.CompletedProcess:
    """``rigkit drift`` as cron runs it: stdout a pipe, no ``COLUMNS``."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(RIGKIT_SANDBOX_HOST=NAME, HF_TOKEN=hostctl.hub_token())
    return subprocess.run([sys.executable, "-m", "rigkit", *args], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_plain_drift_fits_a_pipe_and_its_last_line_is_the_repair_that_clears_it(rig):
    """Issue 40: the last line is the command that repairs what was found; run as printed, it does, and
    drift is clean again. Issue 61: piped, one line per finding, its values whole (they were folded
    mid-word at 80 columns: ``/etc/systemd/system/hyperq`` / ``wen.service``)."""
    with rig.hand_edit("/etc/systemd/system/hyperqwen.service", "# edited by hand"):  # put back if not repaired
        proc = _plain_drift("drift", "-i", "inventory/sandbox.py")
        assert proc.returncode == 3, proc.stdout + proc.stderr
        lines = proc.stdout.rstrip("\n").splitlines()
        at = lines.index(f"{NAME}: drift (1 difference)")
        assert lines[at + 1].split() == ["kind", "item", "declared", "actual", "severity"], proc.stdout
        assert "/etc/systemd/system/hyperqwen.service" in lines[at + 2].split() and lines[at + 2].endswith("drift")
        assert len(lines) == at + 4, proc.stdout  # the finding's one line, then the repair
        assert lines[-1] == f"{NAME}: to repair: rigkit deploy -i inventory/sandbox.py --host {NAME}", proc.stdout
        repair = _plain_drift(*shlex.split(lines[-1].split(": to repair: ", 1)[1])[1:])  # as printed
        assert repair.returncode == 0, repair.stderr[-3000:]
    assert drift()[0] == 0


def test_a_power_limit_the_healer_put_back_shows_in_plain_drift_as_a_warning(rig):
    """Someone's ``nvidia-smi -pl 300``: the healer (rigkit-power.service, the unit rigkit-power.timer runs
    every 30 s) puts 420 W back; plain drift shows that it did (a ``power-healed`` warning, exit 0) — before
    issue 40 only ``--json`` and the report did. The healer's record stays (a warning the deploy's path
    choice below ignores). The healer's unit is started here, as test_metrics.py does, not awaited from its
    timer (0-30 s, and 60 s after boot for its first run): the timer's period is test_lock.py's proof."""
    rig.run("nvidia-smi -pl 300")
    rec: dict = {}
    try:
        for _ in range(240):  # a bounded poll of the healer's own record (the bound only guards a hang)
            # a oneshot: `start` returns once it ran — or joins a run its timer started, which may have read
            # the limit before the -pl above: then the next round starts another
            rig.run("systemctl start rigkit-power.service", check=False)
            got = rig.run("cat /var/lib/rigkit/power.json", check=False)
            rec = json.loads(got.stdout) if got.returncode == 0 and got.stdout.strip() else {}
            if (rec.get("last_reapply") or {}).get("from_w") == 300.0:
                break
            time.sleep(0.5)
    finally:  # the limit as declared whether or not the healer came (a no-op when it did)
        rig.run("nvidia-smi -pl 420")
    assert (rec.get("last_reapply") or {}).get("ok") is True, rec
    proc = _plain_drift("drift", "-i", "inventory/sandbox.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{NAME}: no drift (1 warning)" in proc.stdout and "power-healed" in proc.stdout, proc.stdout
    rc, records, out = drift()
    row = one(records, "power-healed", "GPU 0 power limit")
    assert (rc, row["severity"]) == (0, "warn"), out
    assert re.fullmatch(r"at \S+Z the healer found 300 W and put back 420 W \(enforced 420 W\); 1 re-apply\(s\) in all",
                        row["actual"]), row


# ------------------------------------------------------------------ the deploy's path choice (issue 48)
# Last in the module: they deploy (a changed spec and lock are left on the host, which the module removes).

PROBE_LINE = re.compile(rf"^{re.escape(NAME)}: converged \(probe\): 0 changed; generation (\d+) stays current", re.M)
FULL_LINE = re.compile(rf"^{re.escape(NAME)}: full run: (.*)$", re.M)
PYINFRA_SUMMARY = re.compile(r"^\S+: \d+ operations: \d+ changed", re.M)
#: The breakages a deploy repairs in the suite: a generated subset would vary the run's length; these
#: are independent rows of the sample that restart nothing (the whole table: benchmarks/drift_coverage.py --deploy).
REPAIRED = (
    ("hyperqwen", "Create HyperQwen's compose directory"),
    ("llama_swap", "Install the staged llama-swap config for review"),
    ("secrets", "Generate HyperQwen's VLLM_API_KEY once on the host"),
    ("agent", "Enable and start {stem}.timer"),
    ("power", "Enable gpu-power-limit.service"),
    ("power", "Set the GPU power limit to {spec.gpu_power_limit_w} W"),
    ("models", "Install the model lock"),
)


def deploy(*args: str) -> subprocess.CompletedProcess:
    """``rigkit deploy -i inventory/sandbox.py --no-smoke ARGS`` on this module's host."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME")}
    env.update(RIGKIT_SANDBOX_HOST=NAME, HF_TOKEN=hostctl.hub_token(), HF_HOME="/nonexistent-hf-home")
    return subprocess.run([sys.executable, "-m", "rigkit", "deploy", "-i", "inventory/sandbox.py", "--no-smoke", *args],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=900)


def sudo_commands(rig, since: float) -> int:
    """Commands run through sudo on the host since ``since`` (epoch s): sudo's own journal lines
    (``COMMAND=``) — every remote command of pyinfra and of rigkit runs through sudo."""
    out = rig.run(f"journalctl -q -o cat SYSLOG_IDENTIFIER=sudo --since @{int(since)} | grep -c 'COMMAND=' || true").stdout
    return int(out.strip() or 0)


def generation_index(rig) -> dict:
    return json.loads(rig.run("cat /var/lib/rigkit/generations/index.json").stdout)


def test_a_converged_host_takes_the_probe_path_without_pyinfra(rig):
    """The converged copy: the deploy says ``converged (probe)``, exits 0, runs no pyinfra (no plan, no
    operation, no per-host counts; sudo on the host ran a handful of commands, a full run ~80), records
    nothing; ``--full`` runs pyinfra and changes nothing either."""
    if agent_source_changed(rig):
        pytest.skip("rigkit/ changed since the golden deploy: the wheelhouse differs (a real difference)")
    before = generation_index(rig)
    t0 = float(rig.run("date +%s").stdout) - 1
    proc = deploy()
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = PROBE_LINE.search(proc.stderr)
    assert m and int(m[1]) == before["current"], proc.stderr[-3000:]
    assert "$ pyinfra" not in proc.stderr and not PYINFRA_SUMMARY.search(proc.stderr + proc.stdout)
    probe_cmds = sudo_commands(rig, t0)
    assert generation_index(rig) == before
    time.sleep(1.1)
    t1 = float(rig.run("date +%s").stdout)
    full = deploy("--full")
    assert full.returncode == 0 and re.search(rf"^{re.escape(NAME)}: \d+ operations: 0 changed", full.stderr, re.M), \
        full.stderr[-3000:]
    full_cmds = sudo_commands(rig, t1)
    # the probe path: the generation read, the lock hold, the probe (+ the test's own reads, the harness'
    # serving checks); pyinfra's converged run: ~80
    assert 1 <= probe_cmds <= 12 and full_cmds >= 5 * probe_cmds, (probe_cmds, full_cmds)
    no_secret(proc.stdout + proc.stderr)


def test_each_breakage_takes_the_full_run_which_repairs_it_then_the_probe_path(rig):
    """Breakages of the coverage table on the converged copy: the deploy takes the full run naming the
    differences the probe found, repairs them (drift clean after), and the next deploy takes the probe
    path."""
    if agent_source_changed(rig):
        pytest.skip("rigkit/ changed since the golden deploy")
    rows = [coverage.row_for(role, op) for role, op in REPAIRED]
    r = drift_agreement.repair_batch(rig, rows, PROJECT)
    assert r.problems == [], "\n".join(r.problems) + "\n" + r.output[-4000:]
    assert "difference(s) the deploy repairs" in r.path and "$ pyinfra" in r.output and PYINFRA_SUMMARY.search(r.output)
    no_secret(r.output)


def test_another_build_a_changed_spec_or_lock_takes_the_full_run_then_the_probe_path(rig, tmp_path):
    """The stamps: a generation recorded by another rigkit build, the spec changed (``--data``), the model
    lock changed (the same lock, other bytes): each a full run naming why, after which the same deploy
    takes the probe path — the build and the spec by the current generation stamped again, the lock by a
    new generation."""
    if agent_source_changed(rig):
        pytest.skip("rigkit/ changed since the golden deploy")
    other = "0.0.9+src.000000000000"
    rig.run("python3 -c " + shlex.quote(textwrap.dedent(f"""
        import json
        p = '/var/lib/rigkit/generations/index.json'; idx = json.load(open(p))
        n = idx['current']; r = '/var/lib/rigkit/generations/%d.json' % n; rec = json.load(open(r))
        rec['rigkit_version'] = {other!r}
        [e.update(rigkit_version={other!r}) for e in idx['generations'] if e['n'] == n]
        json.dump(rec, open(r, 'w')); json.dump(idx, open(p, 'w'))
        """)))
    n = generation_index(rig)["current"]
    proc = deploy()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert FULL_LINE.search(proc.stderr)[1].startswith(f"generation {n} was recorded by rigkit {other}, this is 0.1.0+src.")
    assert "stamped again" in proc.stderr or "stamped as made by" in proc.stderr, proc.stderr[-3000:]
    assert generation_index(rig)["current"] == n
    assert PROBE_LINE.search(deploy().stderr)
    # the spec: a key nothing on the host depends on (generations_keep)
    proc = deploy("--data", "generations_keep=9")
    assert proc.returncode == 0 and FULL_LINE.search(proc.stderr)[1].startswith(
        f"the spec changed since generation {n}"), proc.stderr[-3000:]
    again = deploy("--data", "generations_keep=9")
    assert PROBE_LINE.search(again.stderr), again.stderr[-3000:]
    # the model lock: the same entries, other bytes (indented otherwise)
    import golden

    lock = tmp_path / "models.lock.json"
    lock.write_text(json.dumps(json.loads(golden.sandbox_lock().read_text()), indent=1, sort_keys=True) + "\n")
    data = ("--data", "generations_keep=9", "--data", f"lockfile={json.dumps(str(lock))}")
    proc = deploy(*data)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"the model lock changed since generation {n}" in FULL_LINE.search(proc.stderr)[1]
    assert generation_index(rig)["current"] == n + 1
    assert PROBE_LINE.search(deploy(*data).stderr)
