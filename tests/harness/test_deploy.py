"""The deploy, for real: `rigkit deploy -i inventory/sandbox.py` onto fresh sandbox hosts over SSH
with sudo: the real Docker engine, Compose v2, registry and llama-swap 250; pacman's mirror, the GPU
and the hub are the sandbox's stand-ins.

The deploy from nothing is the run's golden host (golden.py): a fresh host with a legacy
strata.service and a foreign daemon.json key, deployed once (with the hub token and pyinfra -vv),
then again (0 changed operations). This module asserts on those two deploys' outputs and checks a
copy of that host with testinfra (the copy is that host under its own identity: the tests at the
end); refusals and further deploys run against the copy afterwards. One fresh host shows the
pending-reboot stop and the lock-file gate (three runs on it); it runs first, beside the golden build.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]
RIGKIT = str(Path(sys.executable).parent / "rigkit")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden  # noqa: E402
import hostctl  # noqa: E402
import mkinitcpio_v41  # noqa: E402
import sandbox_project  # noqa: E402

PROJECT = sandbox_project.cwd()  # the tests' own group_data, never the operator's (sandbox_project.py)

TOKEN = hostctl.hub_token()  # the sandbox hub is private: this token is the one it accepts
SUMMARY = re.compile(r"^(?P<host>\S+): (?P<total>\d+) operations: (?P<changed>\d+) changed, (?P<unchanged>\d+) unchanged, "
                     r"(?P<failed>\d+) failed$", re.M)


def deploy(host, *args, token: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host.name)
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run([RIGKIT, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full", *args], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def summary(proc) -> dict[str, int]:
    m = SUMMARY.search(proc.stderr)
    assert m, proc.stderr[-3000:]
    return {k: int(v) for k, v in m.groupdict().items() if k != "host"}


def test_a_pending_reboot_stops_the_deploy_and_under_a_declared_lock_only_force_reboots(make_host):
    """One fresh host, three runs: without ``--reboot`` the deploy stops at the pending reboot; with it
    but a declared lock file present, the reboot is refused at the gate; ``--force`` goes through (and
    converges the host)."""
    golden.sandbox_lock()  # the deploy uses only the lock; in a fresh state folder nothing has made it yet
    host = make_host("d2")
    proc = deploy(host)
    assert proc.returncode == 1
    assert "reboot, then run again (or pass --data reboot=true)" in proc.stderr
    # the GPU steps never ran: no docker, no power limit unit
    assert host.run("test -e /etc/systemd/system/gpu-power-limit.service", check=False).returncode != 0
    assert host.run("test -e /etc/docker/daemon.json", check=False).returncode != 0

    # the next preflight's nvidia-smi would load the module DKMS just built (as nvidia-modprobe does) and
    # leave nothing to reboot for; an older driver's module still loaded (the fake's seam,
    # stubs/nvidia-smi module_version) is what an upgrade leaves, and it needs the reboot
    host.run("mkdir -p /run/fake-gpu && echo 590.48.01 > /run/fake-gpu/module_version")
    host.write("/run/agent-session.lock", "held")
    boot = host.boot_id()
    proc = deploy(host, "--reboot", "--data", 'lock_files=["/run/agent-session.lock"]')
    assert proc.returncode == 1
    assert "but lock file(s) present: /run/agent-session.lock (a session holds the GPU)" in proc.stderr
    assert "run again when the rig is idle, or pass --force" in proc.stderr
    assert host.run("test -e /etc/docker/daemon.json", check=False).returncode != 0  # stopped at the gate
    assert "loaded nvidia module is 590.48.01" in proc.stderr and host.boot_id() == boot  # not rebooted
    forced = deploy(host, "--reboot", "--force", "--data", 'lock_files=["/run/agent-session.lock"]', token=TOKEN)
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert host.boot_id() != boot


@pytest.fixture(scope="module")
def deployed(make_module_host):
    """A copy of the run's converged host with the two deploys that made it (golden.py): a fresh host
    with a legacy strata.service and a foreign daemon.json key (golden.BEFORE_FIRST_DEPLOY), deployed
    with ``--reboot -vv`` and the hub token, then deployed again."""
    host = make_module_host("d1", converged=True)
    first, second = host.golden.deploys()
    return host, first, second


def test_fresh_host_converges_and_a_second_run_changes_nothing(deployed):
    host, first, second = deployed
    assert first.returncode == 0, first.stderr[-4000:]
    assert summary(first)["failed"] == 0 and summary(first)["changed"] > 30
    assert second.returncode == 0, second.stderr[-4000:]
    assert summary(second)["changed"] == 0, second.stderr[-4000:]
    # llama-swap is first started by the activation, once its live config is there (not by the
    # "Enable llama-swap" step before it, which made a fresh rig's journal begin with a failure)
    assert host.run("journalctl -u llama-swap --no-pager | grep -c 'failed to load config'", check=False).stdout.strip() == "0"


def test_the_first_deploy_recorded_generation_1(deployed):
    _, first, _ = deployed
    assert "no generation recorded yet: this deploy records generation 1" in first.stderr


def test_a_copy_has_its_own_identity(deployed):
    copy = deployed[0]
    gold = copy.golden.root
    assert copy.run("hostname").stdout.strip() == copy.name != copy.golden.name
    assert copy.run("cat /etc/machine-id").stdout.strip() != (gold / "etc/machine-id").read_text().strip()
    for t in ("ed25519", "ecdsa", "rsa"):
        mine = copy.run(f"cat /etc/ssh/ssh_host_{t}_key.pub").stdout.split()[1]
        assert mine != (gold / f"etc/ssh/ssh_host_{t}_key.pub").read_text().split()[1]
        assert mine in (hostctl.host_dir(copy.name) / "known_hosts").read_text()
    assert f"ListenAddress {copy.ssh_hostname}" in copy.run("cat /etc/ssh/sshd_config.d/rigkit-sandbox.conf").stdout


def test_a_copy_keeps_its_model_files_to_the_nanosecond(deployed):
    copy = deployed[0]
    for rec_path in sorted((copy.golden.root / "var/lib/rigkit/models").glob("*.json")):
        rec = json.loads(rec_path.read_text())
        for name, f in rec["files"].items():
            st = os.stat(copy.root / rec["dir"].lstrip("/") / name)
            assert (st.st_mtime_ns, st.st_size) == (f["mtime_ns"], f["size"]), (rec["model"], name)


def test_a_copy_serves_strata_and_its_deploy_changes_nothing(deployed):
    copy = deployed[0]
    running = json.loads(copy.run("curl -fsS 127.0.0.1:8080/running").stdout)["running"]
    assert [(m["model"], m["state"]) for m in running] == [("strata", "ready")]
    proc = deploy(copy, token=TOKEN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(proc)["changed"] == 0, proc.stderr[-3000:]
    # converged: no operation is listed, they are counted (-v lists them; issue 40: ~215 lines of "No changes")
    assert "No changes" not in proc.stderr and "--> Starting operation" not in proc.stderr, proc.stderr[-3000:]
    assert re.search(r"\(\d+ operation\(s\) with no changes not listed; -v lists them\)", proc.stderr)
    print(f"\nconverged deploy: {len(proc.stderr.splitlines())} lines of output")
    # --dry ends with rigkit's own summary; pyinfra's "Conditional Change" table is not shown
    dry = deploy(copy, "--dry", token=TOKEN)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "Conditional Change" not in dry.stdout + dry.stderr
    last = dry.stdout.strip().splitlines()[-1]
    assert re.fullmatch(rf"{copy.name}: the deploy would change nothing \(\d+ operations checked\)"
                        r"(; \d+ conditional operation\(s\) — each runs only after an operation before it changes "
                        r"something — would not run)?", last), dry.stdout
    print(f"converged deploy --dry: {last}")


def test_hf_token_appears_in_no_output_and_no_file_but_its_secret_file(deployed):
    host, first, second = deployed
    for proc in (first, second):
        assert TOKEN not in proc.stdout + proc.stderr
    assert host.run("cat /etc/rigkit/secrets/hf.env").stdout == f"HF_TOKEN={TOKEN}\n"
    # the pattern is taken from the secret file on the host: a token on a command line would
    # itself land in the journal (sudo logs command lines)
    hits = host.run("umask 077; sed -n 's/^HF_TOKEN=//p' /etc/rigkit/secrets/hf.env > /root/.pattern; "
                    "grep -rlF -f /root/.pattern /etc /opt /srv /var /home /root /tmp /run 2>/dev/null "
                    "| grep -v '^/root/.pattern$'; rm -f /root/.pattern; true").stdout.split()
    assert hits == ["/etc/rigkit/secrets/hf.env"]


def test_pins_are_installed_and_survive_pacman_syu(deployed):
    host, _, _ = deployed
    pins = json.loads((ROOT / "tests/harness/mirror.json").read_text())["pins"]
    host.run("pacman -Syu --noconfirm")
    ti = host.testinfra()
    for name, version in pins.items():
        assert ti.run(f"pacman -Q {name}").stdout.split() == [name, version]
    # held as pacman reads pacman.conf: rigkit's file, Include'd once from [options]
    assert set(host.run("pacman-conf IgnorePkg").stdout.split()) == set(pins)
    conf = ti.file("/etc/pacman.conf").content_string
    options = conf.split("[options]", 1)[1].split("\n[", 1)[0]
    assert [ln for ln in options.splitlines() if ln.startswith("Include")] == ["Include = /etc/rigkit/pacman-pins.conf"]


def test_the_kms_hook_went_out_through_rigkits_drop_in_with_one_rebuild(deployed):
    """The stock mkinitcpio.conf (the fake ``linux`` package: Arch's, HOOKS with kms) is left as it
    was; rigkit's drop-in takes kms out; the sandbox's mkinitcpio (v41's own loading lines) recorded
    one build, by the first deploy, without kms — the second deploy rebuilt nothing."""
    host, _, _ = deployed
    stock = hashlib.sha256(mkinitcpio_v41.stock_conf().encode()).hexdigest()
    assert host.run("sha256sum /etc/mkinitcpio.conf").stdout.split()[0] == stock  # untouched
    builds = [json.loads(ln) for ln in host.run("cat /var/lib/fake-mkinitcpio/builds.jsonl").stdout.splitlines()]
    assert len(builds) == 1, builds
    assert builds[0]["dropins"] == ["zz-rigkit-no-kms.conf"] and "kms" not in builds[0]["hooks"]
    assert builds[0]["hooks"] == "base udev autodetect microcode modconf keyboard keymap consolefont block filesystems fsck".split()


def test_units_are_enabled_or_not_as_declared(deployed):
    host, _, _ = deployed
    ti = host.testinfra()
    for unit in ("llama-swap.service", "gpu-power-limit.service", "docker.service", "nvidia-persistenced.service",
                 "hyperqwen-watchdog.timer", "rigkit-keeper.timer"):
        assert ti.service(unit).is_enabled, unit
    for unit in ("llama-swap.service", "docker.service", "hyperqwen-watchdog.timer", "rigkit-keeper.timer",
                 "agent-sync.timer"):  # the last: the operator's own timer, declared beside the inventory
        assert ti.service(unit).is_running, unit
    # no [Install] section: "static", it can never be enabled
    assert host.run("systemctl is-enabled hyperqwen.service", check=False).stdout.strip() == "static"
    assert ti.file("/etc/systemd/system/hyperqwen.service").exists
    assert "Requires=" not in ti.file("/etc/systemd/system/llama-swap.service").content_string.replace("# No Requires=", "")


def test_files_have_their_modes_and_owners(deployed):
    host, _, _ = deployed
    ti = host.testinfra()
    for path, mode, user, group in [
        ("/opt/rigkit/hyperqwen/.env", 0o640, "root", "llama-swap"),
        ("/opt/rigkit/hyperqwen/compose.yaml", 0o644, "root", "root"),
        ("/etc/llama-swap/config.yaml", 0o640, "root", "llama-swap"),
        ("/etc/llama-swap/config.staged.yaml", 0o640, "root", "llama-swap"),
        ("/etc/rigkit/secrets/hf.env", 0o600, "root", "root"),
        ("/etc/rigkit/secrets/hyperqwen.env", 0o640, "root", "llama-swap"),
        ("/usr/local/bin/llama-swap", 0o755, "root", "root"),
    ]:
        f = ti.file(path)
        assert (f.mode, f.user, f.group) == (mode, user, group), path
    assert not [ln for ln in ti.file("/opt/rigkit/hyperqwen/.env").content_string.splitlines()
                if ln.startswith("VLLM_API_KEY")]


def test_daemon_json_has_the_runtime_and_mitigation_and_keeps_a_foreign_key(deployed):
    host, first, _ = deployed
    data = json.loads(host.run("cat /etc/docker/daemon.json").stdout)
    assert data["log-driver"] == "journald"
    assert data["runtimes"]["nvidia"] == {"args": [], "path": "nvidia-container-runtime"}
    assert "native.cgroupdriver=cgroupfs" in data["exec-opts"]
    # the replaced daemon.json is kept, timestamped, and the deploy's output names the backup
    backups = host.run("ls /etc/docker/ | grep '^daemon.json.rigkit-bak-'", check=False).stdout.split()
    assert len(backups) == 1, backups
    assert json.loads(host.run(f"cat /etc/docker/{backups[0]}").stdout) == {"log-driver": "journald"}
    assert f"the replaced file is kept as /etc/docker/{backups[0]}" in first.stderr


def test_power_limit_is_enforced(deployed):
    host, _, _ = deployed
    out = host.run("nvidia-smi --query-gpu=power.limit,enforced.power.limit --format=csv,noheader,nounits").stdout
    assert [float(x) for x in out.split(",")] == [420.0, 420.0]


def test_legacy_strata_unit_is_stopped_disabled_and_backed_up(deployed):
    host, _, _ = deployed
    ti = host.testinfra()
    assert not ti.service("strata.service").is_running
    assert not ti.service("strata.service").is_enabled
    assert "Description=legacy Strata" in ti.file("/var/lib/rigkit/legacy-units/strata.service").content_string


def test_strata_answers_through_llama_swap_from_the_fetched_file(deployed):
    host, _, _ = deployed
    assert host.run("curl -fsS 127.0.0.1:8080/health").stdout.strip() == "OK"
    body = json.dumps({"model": "strata", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    out = host.run(f"curl -fsS -m 120 127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' -d '{body}'")
    assert json.loads(out.stdout)["usage"]["completion_tokens"] == 4
    running = json.loads(host.run("curl -fsS 127.0.0.1:8080/running").stdout)["running"]
    assert [m["model"] for m in running] == ["strata"]
    assert "strata-coder-Q4_K_M.gguf" in host.run("ls /srv/models/strata").stdout


def test_hyperqwen_was_prepared_once_and_its_record_is_the_reference(deployed):
    host, _, _ = deployed
    base = "/srv/models/hyperqwen/Qwen3.8-27B-W4A16-AutoRound"
    index = json.loads(host.run(f"cat {base}/model.safetensors.index.json").stdout)
    assert index["metadata"]["hyperqwen_prepared"]["lm_head"] == "int8"  # rewritten in place by prepare
    record = json.loads(host.run("cat /var/lib/rigkit/models/hyperqwen.json").stdout)
    assert record["reference"] == "prepare" and "lm_head.int8.safetensors" in record["files"]
    status = json.loads(host.run("/opt/rigkit/venv/bin/rigkit-agent status --lock /var/lib/rigkit/models.lock.json "
                                 "--model hyperqwen --prepared").stdout.splitlines()[-1])
    assert status == {"model": "hyperqwen", "converged": True, "reasons": []}


def test_the_weights_came_over_the_lfs_bridge_of_a_hub_that_advertises_xet_and_left_no_xet_cache(deployed):
    """The sandbox hub advertises Xet for every weight file and has no CAS (tests/hub/server.py): a
    fetch that took the Xet path would have failed the deploy. The agent's venv holds hf_xet
    (huggingface-hub 2.4.0 requires it) but never ran it: nothing at its cache's place as root."""
    import httpx2

    host, _, _ = deployed
    lock = json.loads((ROOT / "inventory/sandbox.lock.json").read_text())["models"]["strata"]
    url = f"http://{hostctl.FIX_ADDR}:{hostctl.HUB_PORT}/{lock['source']['repo_id']}/resolve/{lock['commit']}/" \
          f"{lock['files'][0]['path']}"
    head = httpx2.head(url, headers={"Authorization": f"Bearer {TOKEN}"}, follow_redirects=False)
    assert head.status_code == 302 and "xet-auth" in head.links and len(head.headers["x-xet-hash"]) == 64
    assert host.run("ls /opt/rigkit/venv/lib/python3*/site-packages | grep -x hf_xet").stdout.strip() == "hf_xet"
    where = host.run("/opt/rigkit/venv/bin/python -c "
                     "'from huggingface_hub import constants; print(constants.HF_XET_CACHE)'").stdout.strip()
    assert where.endswith("/.cache/huggingface/xet"), where  # HF_HOME unset: the user's cache folder
    for place in sorted({where, "/root/.cache/huggingface/xet"}):
        assert host.run(f"test ! -e {place}", check=False).returncode == 0, f"{place} exists"
    assert host.run("test -s /srv/models/strata/strata-coder-Q4_K_M.gguf", check=False).returncode == 0


def test_a_request_for_the_gguf_baseline_swaps_it_in_and_strata_comes_back(deployed):
    host, _, _ = deployed

    def complete(model):
        body = json.dumps({"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        out = host.run(f"curl -fsS -m 120 127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' "
                       f"-d '{body}'")
        return json.loads(out.stdout)

    def running():
        return [m["model"] for m in json.loads(host.run("curl -fsS 127.0.0.1:8080/running").stdout)["running"]]

    assert complete("gguf-baseline")["usage"]["completion_tokens"] == 4
    assert running() == ["gguf-baseline"]  # one group, swap: Strata was stopped first
    assert "Qwen3.8-27B-Q4_K_M.gguf" in host.run("ls /srv/models/gguf-baseline").stdout
    assert complete("strata")["usage"]["completion_tokens"] == 4
    assert running() == ["strata"]


PERSISTENCED_VAR_RUN = ("/usr/lib/systemd/system/nvidia-persistenced.service:7: PIDFile= references a path below legacy "
                        "directory /var/run/, updating /var/run/nvidia-persistenced/nvidia-persistenced.pid → "
                        "/run/nvidia-persistenced/nvidia-persistenced.pid; please update the unit file accordingly.")


def test_units_verify_for_real_inside_the_deployed_root(deployed, tmp_path):
    """The units the deploy installed, read back from the host's root, are byte for byte what the
    sandbox inventory renders for this host, and the host's own `systemd-analyze verify` (the root's
    systemd, 257 on the trixie root: the rig's systemd is the authority on its units, and the control
    machine's older analyzer cannot read a newer root's units, notes/sandbox-trixie.md item 7), run
    inside the host as an operator would on the rig, says nothing about them: the executables they
    name exist there, every key is known to that systemd, nothing is skipped."""
    host, _, _ = deployed
    out = tmp_path / "render"
    env = {**os.environ, "RIGKIT_SANDBOX_HOST": host.name}
    proc = subprocess.run([RIGKIT, "render", "-i", "inventory/sandbox.py", "--out", str(out)], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rendered = {e["path"]: e for e in json.loads((out / "manifest.json").read_text())}
    units = sorted(p for p in rendered if p.startswith("/etc/systemd/system/"))
    assert {"/etc/systemd/system/llama-swap.service", "/etc/systemd/system/agent-sync.timer"} <= set(units)
    on_host = {p: (host.root / p.lstrip("/")).read_text() for p in units}
    assert {p: t for p, t in on_host.items() if t != (out / p.lstrip("/")).read_text()} == {}
    verify = host.run("systemd-analyze verify --man=no --generators=no " + " ".join(units), check=False)
    said = [ln for ln in (verify.stdout + verify.stderr).splitlines() if ln.strip()]
    ours = {Path(p).name for p in units}
    assert [ln for ln in said if Path(ln.split(":", 1)[0]).name in ours] == []  # nothing about rigkit's units
    # what it says of a package's unit one of rigkit's reaches (gpu-power-limit.service wants it): NVIDIA's own
    # nvidia-persistenced.service (its init/systemd template, tests/harness/stubs/) names /var/run, which systemd
    # rewrites with this notice; upstream's (Arch's) prints it, bookworm's patched it to debug for /usr units
    assert (verify.returncode, said) == (0, [PERSISTENCED_VAR_RUN])


def test_bench_reaches_the_resident_through_an_ssh_forward_with_the_host_context(deployed, tmp_path):
    host, _, _ = deployed
    env = {**os.environ, "RIGKIT_SANDBOX_HOST": host.name}
    proc = subprocess.run([RIGKIT, "bench", "-i", "inventory/sandbox.py", "--host", host.name, "--member", "strata",
                           "--workload", "chat-greedy", "--preset", "small", "--max-tokens", "32", "--out",
                           str(tmp_path / "out")], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary_ = json.loads((tmp_path / "out" / "summary.json").read_text())
    ctx = summary_["context"]
    assert (ctx["gpu"], ctx["driver"], ctx["power_limit_w"], ctx["engine"]) == (
        "NVIDIA GeForce RTX 3090", "610.57.04", 420.0, "llama.cpp")  # the driver as nvidia-smi reports it
    assert (tmp_path / "out" / "requests.jsonl").read_text().count("\n") >= 4
    idle = subprocess.run([RIGKIT, "bench", "-i", "inventory/sandbox.py", "--host", host.name, "--member", "hyperqwen",
                           "--workload", "chat-greedy"], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120)
    # an idle member is not benched through :8080 (it would swap the resident out): NOT-RUN, with why
    assert idle.returncode == 0, idle.stdout[-2000:] + idle.stderr[-2000:]
    said = idle.stdout + idle.stderr
    assert "hyperqwen" in said and "swap the resident out" in said and "window" in said


def test_out_of_range_power_limit_is_refused_before_anything_is_touched(deployed):
    host, _, _ = deployed
    before = host.run("stat -c %Y /etc/llama-swap/config.yaml /opt/rigkit/hyperqwen/.env").stdout
    proc = deploy(host, "--data", "gpu_power_limit_w=460", "--data", "hyperqwen={\"dflash_tokens\": 6}")
    assert proc.returncode == 1
    assert "gpu_power_limit_w 460 W is outside GPU 0's limits 100–450 W" in proc.stderr
    assert host.run("stat -c %Y /etc/llama-swap/config.yaml /opt/rigkit/hyperqwen/.env").stdout == before
    assert "DFLASH_TOKENS=7" in host.run("cat /opt/rigkit/hyperqwen/.env").stdout


def test_deploy_refuses_while_a_window_is_open(deployed):
    host, _, _ = deployed
    host.write("/var/lib/rigkit/window.json", '{"state": "open", "tenant": "hyperqwen"}')
    try:
        proc = deploy(host)
        assert proc.returncode == 1
        assert "the deploy refused, nothing touched" in proc.stderr
        assert "is open (/var/lib/rigkit/window.json: state 'open')" in proc.stderr
    finally:
        host.run("rm -f /var/lib/rigkit/window.json")


def test_a_restart_under_a_declared_lock_is_refused_unless_forced(deployed):
    host, _, _ = deployed
    host.write("/run/agent-session.lock", "held")
    change = ["--data", "lock_files=[\"/run/agent-session.lock\"]", "--data",
              'llama_swap={"health_check_timeout_s": 330}']
    try:
        proc = deploy(host, *change)
        assert proc.returncode == 1
        assert ("this run would interrupt service (/etc/llama-swap/config.yaml changes: llama-swap restarts) but "
                "lock file(s) present: /run/agent-session.lock (a session holds the GPU)") in proc.stderr
        assert "run again when the rig is idle, or pass --force" in proc.stderr
        assert "healthCheckTimeout: 300" in host.run("cat /etc/llama-swap/config.yaml").stdout
        forced = deploy(host, *change, "--force")
        assert forced.returncode == 0, forced.stderr[-3000:]
        assert "healthCheckTimeout: 330" in host.run("cat /etc/llama-swap/config.yaml").stdout
        backups = host.run("ls /etc/llama-swap/").stdout.split()
        assert any(b.startswith("config.yaml.bak-") for b in backups)
    finally:
        host.run("rm -f /run/agent-session.lock")
        assert deploy(host).returncode == 0  # back to the declared config


def test_llama_swap_is_the_real_go_binary_250_from_the_pinned_tarball(deployed):
    """make sandbox-fixtures serves the real llama-swap built from upstream's source
    (tests/harness/llama_swap_release.py), and the deploy installs exactly that tarball's binary."""
    host, first, second = deployed
    version = host.run("/usr/local/bin/llama-swap -version").stdout.strip()
    assert version == "version: 250 (60226b63776e), built at 2026-08-14T15:45:40Z"
    assert host.run("head -c 4 /usr/local/bin/llama-swap | od -An -c").stdout.split() == ["177", "E", "L", "F"]
    api = json.loads(host.run("curl -fsS 127.0.0.1:8080/api/version").stdout)
    assert api == {"version": "250", "commit": "60226b63776e", "build_date": "2026-08-14T15:45:40Z"}


def test_a_daemon_json_change_restarts_docker_and_strata_serves_again_after_the_deploy(deployed):
    """On a converged host, a daemon.json that lost the nvidia runtime is merged back, so docker is
    restarted: the real engine (no live-restore) takes Strata's container down with it. The deploy
    must leave Strata serving, not just llama-swap running."""
    host, _, _ = deployed
    old = host.run("docker inspect --format '{{.Id}}' strata").stdout.strip()
    host.run("python3 -c \"import json; p='/etc/docker/daemon.json'; d=json.load(open(p)); d.pop('runtimes'); "
             "open(p, 'w').write(json.dumps(d, indent=4))\"")
    proc = deploy(host, token=TOKEN)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.search(r"Restart docker for the new daemon.json[^\n]*\n\s+\[\S+\] Success", proc.stderr), proc.stderr[-4000:]
    running = json.loads(host.run("curl -fsS 127.0.0.1:8080/running").stdout)["running"]
    assert [(m["model"], m["state"]) for m in running] == [("strata", "ready")], running
    assert re.search(r"Restart llama-swap for its new unit or binary, a docker restart[^\n]*\n\s+\[\S+\] Success",
                     proc.stderr), proc.stderr[-4000:]
    new = host.run("docker inspect --format '{{.Id}}' strata").stdout.strip()
    assert new and new != old  # a fresh container: the restart really took the old one down
    again = deploy(host, token=TOKEN)
    assert summary(again)["changed"] == 0, again.stderr[-3000:]
