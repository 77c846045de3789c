"""node_exporter as part of the rig (issue 66): present in every declared part — the pin ``rigkit lock``
resolves, the rendered ``/etc/conf.d/prometheus-node-exporter``, the enabled unit, the textfile folder, what
drift compares — exactly when ``metrics_textfile_dir`` is set, and nothing of it otherwise; its arguments as
Arch's unit reads them; bad values refused naming the key, the value and what is allowed.

The harness side (the package installed from the lock, serving rigkit's files, drift seeing it stopped) is
tests/harness/test_metrics.py."""
from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit import paths
from rigkit.drift.declared import declared_for
from rigkit.render import declared_state
from rigkit.render.files import render
from rigkit.spec.problems import SpecError
from rigkit.lockfile.view import declared_pins, resolved
from rigkit.spec.claims import spec_claims
from rigkit.spec.validate import spec_from_dict

FOLDERS = st.sampled_from(["/var/lib/prometheus/node-exporter", "/var/lib/node_exporter/textfile_collector",
                           "/srv/metrics", "/var/lib/rigkit-metrics"])
ADDRESSES = st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str))


def parts(spec) -> dict[str, bool]:
    """Where node_exporter shows in what the deploy does and drift compares, for ``spec`` as the lock resolves
    it (its pins in place)."""
    lock = {"pins": {p: {"want": w, "version": f"{w}.0-1"} for p, (w, _k) in declared_pins(spec).items()}}
    spec = resolved(spec, lock)
    files = render(spec)
    d = declared_for("rig", spec, "inventory/rig.py", None, files=files)
    return {"pin": paths.NODE_EXPORTER_PACKAGE in declared_pins(spec),
            "pins file": paths.NODE_EXPORTER_PACKAGE in files[paths.PINS_CONF].text,
            "conf": paths.NODE_EXPORTER_CONF in files,
            "unit": paths.NODE_EXPORTER_UNIT in declared_state.enabled_units(spec),
            "folder": bool(spec.metrics_textfile_dir) and spec.metrics_textfile_dir in declared_state.directories(spec),
            "drift package": paths.NODE_EXPORTER_PACKAGE in d.packages,
            "drift unit": paths.NODE_EXPORTER_UNIT in d.units}


@given(folder=st.one_of(st.none(), FOLDERS), address=ADDRESSES, port=st.integers(1, 65535))
@settings(max_examples=25, deadline=None)
def test_node_exporter_is_declared_exactly_when_metrics_are_asked_for(folder, address, port):
    data = {"node_exporter": {"listen_address": address, "port": port}}
    if folder:
        data["metrics_textfile_dir"] = folder
    got = parts(spec_from_dict(data))
    assert got == {k: bool(folder) for k in got}, got


def test_without_metrics_nothing_of_it_is_declared():
    """The default spec (``metrics_textfile_dir`` unset): no pin, no file, no unit, no folder — the deploy
    installs nothing of node_exporter (roles/metrics.py returns before adding an operation) and drift expects
    none."""
    spec = spec_from_dict({})
    assert spec.metrics_textfile_dir is None
    assert not any(parts(spec).values())
    assert not any("node" in p or "prometheus" in p for p in render(spec))


#: The ports the default spec's other parts own (rigkit.spec.claims): node_exporter's may be any other one —
#: one of these is refused as a clash (hypothesis drew strata's 18030), which test_claims holds.
TAKEN = {c.resource for c in spec_claims(spec_from_dict({})) if c.kind == "port" and not c.key.startswith("node_exporter")}


@given(folder=FOLDERS, address=ADDRESSES, port=st.integers(1, 65535).filter(lambda p: p not in TAKEN))
@settings(max_examples=25, deadline=None)
def test_the_arguments_are_what_arch_s_unit_passes_node_exporter(folder, address, port):
    """systemd reads ``NODE_EXPORTER_ARGS="…"`` from the EnvironmentFile (quotes removed) and splits
    ``$NODE_EXPORTER_ARGS`` on whitespace into words (systemd.service(5), "Command lines"): the words are
    exactly the two flags, the listen address as Go's ``net.JoinHostPort`` writes it."""
    spec = spec_from_dict({"metrics_textfile_dir": folder,
                           "node_exporter": {"listen_address": address, "port": port}})
    text = render(spec)[paths.NODE_EXPORTER_CONF].text
    [line] = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    key, _, value = line.partition("=")
    assert key == "NODE_EXPORTER_ARGS" and value.startswith('"') and value.endswith('"')
    host = f"[{address}]" if ":" in address else address
    assert shlex.split(value)[0].split() == [f"--collector.textfile.directory={folder}",
                                             f"--web.listen-address={host}:{port}"]


def test_its_port_is_free_while_metrics_are_not_asked_for():
    assert spec_from_dict({"node_exporter": {"port": 8080}}).node_exporter.port == 8080


def test_loopback_by_default():
    spec = spec_from_dict({"metrics_textfile_dir": "/var/lib/prometheus/node-exporter"})
    assert spec.node_exporter.listen == "127.0.0.1:9100"
    assert declared_pins(spec)[paths.NODE_EXPORTER_PACKAGE] == ("1.10", "node_exporter.version")


@pytest.mark.parametrize("data, key, value, allowed", [
    ({"node_exporter": {"listen_address": "rig.lan"}}, "node_exporter.listen_address", "'rig.lan'", "not an IP address"),
    ({"node_exporter": {"listen_address": "0.0.0.0:9100"}}, "node_exporter.listen_address", "'0.0.0.0:9100'",
     "not an IP address"),
    ({"node_exporter": {"port": 0}}, "node_exporter.port", "0", ""),
    ({"node_exporter": {"version": "1.10.2-1"}}, "node_exporter.version", "'1.10.2-1'", "the series"),
    ({"node_exporter": {"listen": "127.0.0.1"}}, "node_exporter.listen", "", ""),
    # one owner per port and unit (rigkit.spec.claims): node_exporter's claims count only when metrics are asked for
    ({"metrics_textfile_dir": "/srv/metrics", "node_exporter": {"port": 8080}}, "node_exporter.port", "8080",
     "already belongs to llama_swap.port"),
    ({"metrics_textfile_dir": "/srv/metrics", "legacy_units": ["prometheus-node-exporter.service"]}, "legacy_units[0]",
     "'prometheus-node-exporter.service'", "already belongs to metrics_textfile_dir"),
])
def test_bad_values_are_refused_naming_key_value_and_what_is_allowed(data, key, value, allowed):
    with pytest.raises(SpecError) as exc:
        spec_from_dict(data)
    msg = str(exc.value)
    assert key in msg and value in msg and allowed in msg, msg
