"""rigkit's record of its own writes (:mod:`rigkit.common.written`), one format for every writer: the
deploy's rendered files, the wire-in's companions (a remote shell script) and the agent's activation."""

from __future__ import annotations

import hashlib
import subprocess

from hypothesis import given, settings, strategies as st

from rigkit import paths
from rigkit.common import written
from rigkit.host.activate import _record_writes
from rigkit.host.config import HostConfig
from rigkit.operations.config import written_marker

# file names as a host may have them: spaces, quotes, $ and backslashes included (never NUL or /)
NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/\n"), min_size=1, max_size=20)


@given(a=NAMES, b=NAMES)
def test_one_record_per_path_under_the_state_folder(a, b):
    ma, mb = written.marker(f"/etc/{a}", "/var/lib/rigkit"), written.marker(f"/etc/{b}", "/var/lib/rigkit")
    assert ma.startswith("/var/lib/rigkit/written/") and "/" not in ma.removeprefix("/var/lib/rigkit/written/")
    assert (ma == mb) == (a == b)
    assert written_marker(f"/etc/{a}") == written.marker(f"/etc/{a}", paths.STATE_DIR)  # the deploy's is this one


@settings(max_examples=25, deadline=None)
@given(name=NAMES, content=st.binary(max_size=64))
def test_the_shell_record_and_the_hosts_record_read_back_the_same(tmp_path_factory, name, content):
    """A remote script's record (the wire-in, the deploy) and the agent's are one format: each is read
    back by :func:`written.recorded` as the content's sha256, whatever the file's name."""
    state = tmp_path_factory.mktemp("state")
    target = tmp_path_factory.mktemp("etc") / name
    target.write_bytes(content)
    digest = hashlib.sha256(content).hexdigest()
    subprocess.run(["sh", "-c", written.shell(str(target), digest, str(state))], check=True)
    assert written.recorded(target, state) == digest
    (state / "written").rename(state / "by-shell")
    assert written.record(target, state) == digest
    assert written.recorded(target, state) == digest
    assert (state / "written" / (state / "by-shell").iterdir().__next__().name).read_text() == \
        next((state / "by-shell").iterdir()).read_text()


def test_no_record_reads_as_none(tmp_path):
    assert written.recorded(tmp_path / "f", tmp_path) is None
    assert written.record(tmp_path / "absent", tmp_path) is None
    assert written.parse("") is None and written.parse(None) is None


def test_the_agents_activation_records_the_live_config_and_the_staging_copy(tmp_path):
    live, staging = tmp_path / "config.yaml", tmp_path / "next" / "config.next.yaml"
    live.write_text("models: {}\n")
    staging.parent.mkdir()
    staging.write_text("models: {}\n")
    cfg = HostConfig({"paths": {"state_dir": str(tmp_path / "state")}, "llama_swap": {"staging": str(staging)}})
    said: list[str] = []
    _record_writes(cfg, live, said.append)
    want = hashlib.sha256(b"models: {}\n").hexdigest()
    assert written.recorded(live, tmp_path / "state") == want == written.recorded(staging, tmp_path / "state")
    assert said == []
    _record_writes(HostConfig({}), live, said.append)  # a host config without the keys: a warning, no raise
    assert said and said[0].startswith("warning: could not record")
