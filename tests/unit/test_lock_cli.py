"""``rigkit lock`` as the operator runs it, against the sources of test_lock_sources (an archive built by the
harness' mirror builder and the real repo-add, served with nginx's listing pages; a registry answering the
token flow; a release server): the lock filled, a second lock changing nothing, ``--update`` after the
archive publishes a newer driver of the series showing ``old → new`` and exiting 3, ``--write`` writing
it, a missing series refused naming the pin; ``rigkit check`` naming what the lock lacks."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from .test_lock_sources import _pkg, _serve, archive, archive_template, publish, registry  # noqa: F401

RIGKIT = [sys.executable, "-m", "rigkit"]


def _run(args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    return subprocess.run([*RIGKIT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def lab(tmp_path, archive, registry):  # noqa: F811
    root, archive_url = archive
    _handler, reg, one_d, index_d = registry
    rel = root / "releases"
    rel.mkdir()
    (rel / "llama-swap_250_linux_amd64.tar.gz").write_bytes(b"a tarball")
    srv, base = _serve(root)
    proj = tmp_path / "proj"
    (proj / "inventory").mkdir(parents=True)
    (proj / "group_data").mkdir()
    (proj / "inventory" / "lab.py").write_text('hosts = [("box", {"ssh_hostname": "box.lan"})]\n')
    (proj / "group_data" / "all.py").write_text(
        f"arch_archive_url = {archive_url!r}\n"
        f"hyperqwen = {{'image': {{'ref': 'sha-1a2b3c4', 'registry': {reg!r}}}}}\n"
        f"strata = {{'image': {{'ref': 'server-cuda', 'registry': {reg!r}}}}}\n"
        f"gguf_baseline = {{'image': {{'ref': 'server-cuda', 'registry': {reg!r}}}}}\n"
        f"llama_swap = {{'release_url': '{base}/releases/llama-swap_250_linux_amd64.tar.gz'}}\n"
        "models = {'hyperqwen': {'repo_id': ''}}\n")  # no model: the hub is tests/models' (models lock is one part)
    yield proj, root, one_d, index_d
    srv.shutdown()


def test_lock_fills_a_second_changes_nothing_and_update_shows_the_newer_driver(lab):
    proj, root, one_d, index_d = lab
    first = _run(["lock", "-i", "inventory/lab.py"], proj)
    assert first.returncode == 0, first.stderr
    lock_file = proj / "inventory" / "lab.lock.json"
    lock = json.loads(lock_file.read_text())
    assert lock["version"] == 2 and lock["models"] == {}
    assert {p: e["version"] for p, e in lock["pins"].items()} == {
        "cuda": "13.3.2-1", "nvidia-open-dkms": "610.57.04-1", "nvidia-utils": "610.57.04-1", "opencl-nvidia": "610.57.04-1"}
    assert (lock["images"]["hyperqwen"]["digest"], lock["images"]["strata"]["digest"]) == (one_d, index_d)
    assert lock["llama_swap"]["sha256"] == hashlib.sha256(b"a tarball").hexdigest()
    assert "pins.nvidia-utils: 610.57 → 610.57.04-1 (sha256 " in first.stderr
    assert f"images.strata: ghcr.io/ggml-org/llama.cpp:server-cuda → {index_d} (index, linux/amd64 {one_d})" in first.stderr
    text = lock_file.read_text()

    second = _run(["lock", "-i", "inventory/lab.py"], proj)
    assert second.returncode == 0 and second.stderr.endswith("inventory/lab.lock.json: unchanged\n"), second.stderr
    assert lock_file.read_text() == text

    publish(root, [_pkg(n, "610.57.09-1", "2026-01-05") for n in ("nvidia-utils", "opencl-nvidia", "nvidia-open-dkms")])
    assert _run(["lock", "-i", "inventory/lab.py"], proj).returncode == 0 and lock_file.read_text() == text
    update = _run(["lock", "-i", "inventory/lab.py", "--update"], proj)
    assert update.returncode == 3, update.stderr
    assert [ln.strip() for ln in update.stderr.splitlines() if ln.startswith("  ")] == [
        "pins.nvidia-open-dkms: 610.57.04-1 → 610.57.09-1", "pins.nvidia-utils: 610.57.04-1 → 610.57.09-1",
        "pins.opencl-nvidia: 610.57.04-1 → 610.57.09-1"]
    assert update.stderr.endswith("3 entries would change; `--write` writes them\n")
    assert lock_file.read_text() == text  # shown, not written
    assert _run(["lock", "-i", "inventory/lab.py", "--update", "cuda"], proj).returncode == 0
    written = _run(["lock", "-i", "inventory/lab.py", "--update", "nvidia-utils", "--write"], proj)
    assert written.returncode == 0 and "(3 entries changed)" in written.stderr, written.stderr
    assert json.loads(lock_file.read_text())["pins"]["opencl-nvidia"]["version"] == "610.57.09-1"


def test_a_missing_series_is_refused_naming_the_pin_and_nothing_is_written(lab):
    proj, _root, _one, _index = lab
    proc = _run(["lock", "-i", "inventory/lab.py", "--data", 'cuda_version="13.9"'], proj)
    assert proc.returncode == 1
    assert "error: pins.cuda: the archive has no cuda in the series 13.9 (declared by cuda_version;" in proc.stderr
    assert not (proj / "inventory" / "lab.lock.json").exists()
    bad = _run(["lock", "-i", "inventory/lab.py", "--update", "no-such"], proj)
    assert bad.returncode == 2 and "--update no-such: no such lock entry" in bad.stderr


def test_check_names_what_the_lock_has_not_resolved(lab):
    proj, _root, _one, _index = lab
    (proj / "inventory" / "lab.lock.json").write_text(json.dumps({"version": 1, "models": {}}))
    proc = _run(["check", "-i", "inventory/lab.py"], proj)
    warns = [ln.strip() for ln in proc.stderr.splitlines() if "not in inventory/lab.lock.json" in ln]
    assert warns[0] == ("warn  pins.cuda: not in inventory/lab.lock.json (cuda_version '13.3' unresolved); "
                        "re-lock with `rigkit lock -i inventory/lab.py`")
    assert len(warns) == 8  # four pins, three images, the release


def test_offline_the_lock_says_nothing_was_written_every_source_it_needs_and_how_to_lock_elsewhere(tmp_path):
    """Issue 61: offline, ``rigkit lock`` stopped at its first source with ``unreachable (ConnectionError)``.
    Every source here refuses the connection (127.0.0.1:1, nothing listens): the answer names what was
    written (nothing: no lock, then an existing lock byte for byte as it was), every entry the lock needs
    with its server — the entries read from the spec's own declarations, not listed here — and how to
    lock on another machine and bring the lock over."""
    proj = tmp_path / "proj"
    (proj / "inventory").mkdir(parents=True)
    (proj / "group_data").mkdir()
    (proj / "inventory" / "off.py").write_text('hosts = [("box", {"ssh_hostname": "box.lan"})]\n')
    (proj / "group_data" / "all.py").write_text(
        "arch_archive_url = 'http://127.0.0.1:1/archive'\n"
        "hf_endpoint = 'http://127.0.0.1:1'\n"
        "hyperqwen = {'image': {'ref': 'sha-1a2b3c4', 'registry': 'https://127.0.0.1:1'}}\n"
        "strata = {'image': {'ref': 'server-cuda', 'registry': 'https://127.0.0.1:1'}}\n"
        "gguf_baseline = {'image': {'ref': 'server-cuda', 'registry': 'https://127.0.0.1:1'}}\n"
        "llama_swap = {'release_url': 'http://127.0.0.1:1/releases/llama-swap_250_linux_amd64.tar.gz'}\n"
        "models = {'strata': {'repo_id': 'org/strata-gguf'}}\n")
    # what the spec declares, read by its own loader (in a process of its own: pyinfra's loader patches gevent)
    declared = subprocess.run([sys.executable, "-c", (
        "import json; import pyinfra_cli; from rigkit.spec.inventory import load_hosts; "
        "from rigkit.lockfile.view import declared_images, declared_pins; "
        "s = load_hosts('inventory/off.py')[0].spec; "
        "print(json.dumps([*('pins.' + p for p in declared_pins(s)), "
        "*('images.' + n for n, i in declared_images(s).items() if i.ref is not None), 'llama_swap', "
        "*('models.' + n for n, m in s.models.items() if m.repo_id or m.url)]))")],
        cwd=proj, capture_output=True, text=True, check=True)
    needed = set(json.loads(declared.stdout.splitlines()[-1]))
    lock_file = proj / "inventory" / "off.lock.json"
    for existed in (False, True):
        if existed:
            lock_file.write_text('{"version": 2, "models": {}}\n')
        run = _run(["lock", "-i", "inventory/off.py"], proj)
        assert run.returncode == 1, run.stderr
        lines = run.stderr.splitlines()
        assert lines[0].startswith("error: ") and "unreachable (ConnectionError)" in lines[0], lines
        assert lines[1] == "nothing written: inventory/off.lock.json " + (
            "is as it was" if existed else "still does not exist")
        assert lock_file.exists() == existed and (not existed or lock_file.read_text() == '{"version": 2, "models": {}}\n')
        listed = {}
        for line in lines[3:-1]:
            server, _, entries = line.strip().partition(": ")
            listed.update({e: server for e in entries.split(", ")})
        assert set(listed) == needed and len(needed) > 8, (sorted(listed), sorted(needed))
        assert set(listed.values()) == {"http://127.0.0.1:1", "https://127.0.0.1:1"}
        assert lines[2] == f"this lock needs the network for {len(needed)} entries from 2 server(s):"
        assert lines[-1].startswith("to lock elsewhere: on a machine that reaches them, ") and (
            "run `rigkit lock -i inventory/off.py`" in lines[-1]
            and "copy the inventory/off.lock.json it writes to inventory/off.lock.json here" in lines[-1]), lines[-1]
