"""Every public operation in ``rigkit/operations/`` carries a runnable example, as pyinfra's own do.

The docstring ends like pyinfra 3.10's (``pyinfra/operations/files.py``)::

    **Example:**

    .. code:: python

        from rigkit.operations.gpu import gpu_power_limit
        gpu_power_limit(
            name="Set the GPU power limit to 420 W",
            watts=420,
        )

"Runnable" is checked as far as it can be without a host: the block parses, imports the operation
from its own module, calls that very operation once with keyword arguments only, every value is a
literal (``ast.literal_eval``), and the operation's keyword arguments bind against the real
signature of the undecorated function (pyinfra's ``@operation`` keeps it as ``_inner`` and, through
``functools.wraps``, as ``__wrapped__``). pyinfra's global arguments (``name``, ``_sudo``...) are
taken out before binding; ``name`` is required, as every op in the roles is named.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from pyinfra.api.arguments import all_argument_meta

import rigkit.operations

OPS_DIR = Path(rigkit.operations.__file__).parent

#: ``(operation, argument)`` whose value is no literal in any real call, so the example passes a
#: bare Name for it (and says in a comment where the value comes from). Only these.
NAME_ARGUMENTS = {
    # the manifest is rigkit.render.generations.manifest(spec, rendered, lock_text): ~15 keys of sha256s,
    # the spec snapshot and versions; a literal copy in a docstring would only go stale
    ("recorded_generation", "manifest"),
}


def operations() -> dict[str, object]:
    """``{"module.name": decorated operation}`` of every public operation defined (not merely
    imported) in a module of ``rigkit.operations``, recognised by what pyinfra's decorator leaves:
    a callable whose ``_inner`` is the function ``functools.wraps`` recorded as ``__wrapped__``."""
    found = {}
    for info in pkgutil.iter_modules([str(OPS_DIR)]):
        module = importlib.import_module(f"rigkit.operations.{info.name}")
        for attr, obj in vars(module).items():
            inner = getattr(obj, "_inner", None)
            if (not attr.startswith("_") and callable(obj) and inspect.isfunction(inner)
                    and getattr(obj, "__wrapped__", None) is inner and inner.__module__ == module.__name__):
                found[f"{info.name}.{attr}"] = obj
    return found


OPERATIONS = operations()


def decorated_in_source() -> set[str]:
    """``module.name`` of every public top-level function the sources decorate with ``operation``
    (``@operation()`` or ``@operation(...)``): what the import-based discovery must also find."""
    out = set()
    for path in sorted(OPS_DIR.glob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                for dec in node.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    if isinstance(target, ast.Name) and target.id == "operation":
                        out.add(f"{path.stem}.{node.name}")
    return out


def example_code(doc: str | None) -> str:
    """The code of the ``**Example:**`` block (``.. code:: python`` then an indented block),
    dedented. Raises AssertionError naming what is missing."""
    lines = inspect.cleandoc(doc or "").splitlines()
    assert "**Example:**" in [ln.strip() for ln in lines], "the docstring has no **Example:** block"
    i = [ln.strip() for ln in lines].index("**Example:**") + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    assert i < len(lines) and lines[i].strip() == ".. code:: python", \
        "**Example:** is not followed by a `.. code:: python` block"
    block = []
    for ln in lines[i + 1:]:
        if ln.strip() and not ln.startswith(" "):
            break
        block.append(ln)
    code = inspect.cleandoc("\n".join(block))
    assert code, "the `.. code:: python` block is empty"
    return code


def test_every_decorated_operation_is_found_by_import():
    assert OPERATIONS, "no operation found in rigkit/operations"
    assert sorted(OPERATIONS) == sorted(decorated_in_source())


def check_example(func, doc: str | None) -> None:
    """Raise AssertionError unless ``doc``'s example is one literal call of ``func`` (the
    undecorated operation) that binds against its signature."""
    name = func.__name__
    code = example_code(doc)
    tree = ast.parse(code, f"{name} example")

    imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
    calls = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
    others = [ast.unparse(n) for n in tree.body if n not in imports and n not in calls]
    assert not others, f"the example holds more than the import and the call: {others}"
    assert [(n.module, [a.name for a in n.names]) for n in imports] == [(func.__module__, [name])], \
        f"the example must import exactly `from {func.__module__} import {name}`"
    assert len(calls) == 1, f"the example must call {name} once, found {len(calls)} calls"
    call = calls[0].value
    assert isinstance(call.func, ast.Name) and call.func.id == name, \
        f"the example calls {ast.unparse(call.func)}, not {name}"
    assert not call.args, f"{name}'s example passes positional arguments; name every one"
    assert all(k.arg is not None for k in call.keywords), f"{name}'s example passes **kwargs"

    values = {}
    for kw in call.keywords:
        if (name, kw.arg) in NAME_ARGUMENTS:
            assert isinstance(kw.value, ast.Name), f"{name}({kw.arg}=...) is allowed a bare Name only"
            values[kw.arg] = object()
            continue
        try:
            values[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            raise AssertionError(f"{name}({kw.arg}={ast.unparse(kw.value)}): not a literal") from None
    assert isinstance(values.get("name"), str) and values["name"], f"{name}'s example gives no name="

    own = {k: v for k, v in values.items() if k not in all_argument_meta}
    try:
        inspect.signature(func).bind(**own)
    except TypeError as exc:
        raise AssertionError(f"{name}'s example does not fit {name}{inspect.signature(func)}: {exc}") from None


@pytest.mark.parametrize("qualname", sorted(OPERATIONS))
def test_operation_docstring_has_an_example_calling_it_with_its_real_arguments(qualname):
    check_example(OPERATIONS[qualname]._inner, OPERATIONS[qualname].__doc__)


def _doc(call: str, imports: str = "from rigkit.operations.gpu import gpu_power_limit") -> str:
    body = "\n".join("        " + ln for ln in (imports + "\n" + call).splitlines())
    return f"Set the limit.\n\n    **Example:**\n\n    .. code:: python\n\n{body}\n    "


@pytest.mark.parametrize("doc, message", [
    ("Set the limit.\n\n    + watts: W\n", "the docstring has no **Example:** block"),
    (_doc('gpu_power_limit(name="Set it", watts=420, wats=420)'),
     "gpu_power_limit's example does not fit gpu_power_limit(watts: 'int', index: 'int' = 0): "
     "got an unexpected keyword argument 'wats'"),
    (_doc('gpu_power_limit(name="Set it", index=0)'),
     "gpu_power_limit's example does not fit gpu_power_limit(watts: 'int', index: 'int' = 0): "
     "missing a required argument: 'watts'"),
    (_doc('gpu_power_limit(name="Set it", watts=limit)'), "gpu_power_limit(watts=limit): not a literal"),
    (_doc('gpu_power_limit(watts=420)'), "gpu_power_limit's example gives no name="),
    (_doc('gpu_power_limit(name="Set it", watts=420)', imports="from rigkit.operations.boot import gpu_power_limit"),
     "the example must import exactly "
     "`from rigkit.operations.gpu import gpu_power_limit`"),
    (_doc('reboot(name="Reboot")'),
     "the example calls reboot, not gpu_power_limit"),
])
def test_an_example_that_does_not_fit_the_operation_fails(doc, message):
    with pytest.raises(AssertionError) as err:
        check_example(OPERATIONS["gpu.gpu_power_limit"]._inner, doc)
    assert str(err.value).splitlines()[0] == message
