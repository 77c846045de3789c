"""rigkit.deploy.planned over pyinfra's own operation objects (``OperationMeta``, ``StateOperationHostData``)
and ``_if`` in every shape the roles give it: a bound ``did_change`` (roles/docker.py), a lambda over
several (roles/llama_swap.py), ``any_changed`` (roles/agent.py), a chain (a restart gated on a gated
restart), a condition that is not a change (a fact). Proved over generated plans against a direct
reading of what pyinfra would do when it runs them in order."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from pyinfra.api.operation import OperationMeta
from pyinfra.api.state import StateOperationHostData
from pyinfra.operations.util import any_changed

from rigkit.deploy.planned import read, record, would_run


class _Host:
    """A host as the state's key (pyinfra's ``Host`` hashes by identity)."""

    name = "box"


def _state(ops):
    """A pyinfra-shaped state of one host from ``[(name, body changes, _if or None)]``; returns
    ``(state, host, metas)``."""
    host = _Host()
    metas, data, names = [], {}, {}
    for i, (name, change, _if) in enumerate(ops):
        meta = OperationMeta(f"h{i}", change)
        metas.append(meta)
        data[f"h{i}"] = StateOperationHostData(lambda: iter(()), {"_if": _if(metas) if _if else None}, meta)
        names[f"h{i}"] = SimpleNamespace(names={name})
    state = SimpleNamespace(ops={host: data}, op_meta=names, get_op_order=lambda: list(data))
    return state, host, metas


def test_each_shape_of_if_the_roles_use():
    state, host, metas = _state([
        ("Docker | Merge daemon.json", True, None),
        ("Docker | Restart docker", True, lambda m: m[0].did_change),                    # bound method
        ("llama-swap | Install llama-swap.service", False, None),
        ("llama-swap | Reload systemd", True, lambda m: lambda: m[2].did_change()),     # lambda
        ("llama-swap | Restart llama-swap", True,
         lambda m: lambda: m[2].did_change() or m[1].did_change()),                     # chained on a gated one
        ("Agent | Install the agent", True, lambda m: any_changed(m[2])),               # any_changed
        ("Agent | Create the venv", True, lambda m: lambda: True),                      # a fact, not a change
        ("Agent | Nothing to do", False, lambda m: lambda: True),                       # its body changes nothing
    ])
    assert would_run(state, host) == {"Docker | Restart docker": True, "llama-swap | Reload systemd": False,
                                      "llama-swap | Restart llama-swap": True, "Agent | Install the agent": False,
                                      "Agent | Create the venv": True}
    # every operation as pyinfra left it: not complete, did_change() still refuses before execution
    assert all(not m.is_complete() for m in metas)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.none() | st.lists(st.integers(0, 30), max_size=3)), min_size=1,
                max_size=12))
def test_over_generated_plans_it_is_what_running_them_in_order_would_do(spec):
    """Each generated operation: whether its body changes, and ``_if = any_changed(earlier ones)`` (or
    none). Running them in order: an ungated one runs when its body changes; a gated one when its body
    changes and one it waits on ran."""
    ops, ran = [], []
    for i, (change, deps) in enumerate(spec):
        deps = None if deps is None else sorted({d % i for d in deps}) if i else None
        gate = None if deps is None else (lambda m, deps=deps: any_changed(*(m[d] for d in deps)))
        ops.append((f"op {i}", change, gate))
        ran.append(change and (deps is None or any(ran[d] for d in deps)))
    state, host, _ = _state(ops)
    expected = {f"op {i}": ran[i] for i, (change, deps) in enumerate(spec)
                if change and ops[i][2] is not None}
    assert would_run(state, host) == expected


def test_record_writes_only_when_asked_and_read_gives_it_back(tmp_path):
    state, host, _ = _state([("A | a", True, None), ("A | b", True, lambda m: m[0].did_change)])
    record(state, host, env={})
    assert list(tmp_path.iterdir()) == []
    record(state, host, env={"RIGKIT_PLAN_CONDITIONS": str(tmp_path)})
    assert read(tmp_path, ["box", "gone"]) == {"box": {"A | b": True}}
