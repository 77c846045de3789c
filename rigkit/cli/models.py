"""``rigkit models``: the models of the lock file (:mod:`rigkit.lockfile.hub`, :mod:`rigkit.lockfile.view`).

- ``rigkit models lock [-i PATH] [--host NAME]`` resolves every model of the inventory's hosts
  on the hub (``HF_ENDPOINT``; the token from ``HF_TOKEN`` or hf's token file, never shown) and
  writes them into the lock file (:func:`rigkit.lockfile.path.lock_file_path`: the spec's ``lockfile``, else
  ``<inventory>.lock.json`` beside the inventory). Exit 0 written; 1 the hub or a URL
  failed (nothing written); 2 invalid inventory, or two hosts declare one model name differently.
- ``rigkit models check [-i PATH] [--host NAME]`` compares the spec with the lock. Exit 0 the
  lock matches; 2 it does not ("re-lock"), or there is no lock.
"""

from __future__ import annotations

import sys

import click

from rigkit import exitcodes, hints
from rigkit.cli.common import err, error, host_option, inventory_option, load_or_exit, warn


def models_of(host_specs) -> dict:
    """Union of the hosts' ``spec.models`` (``{name: ModelSpec}``); exits 2 (:data:`exitcodes.INVALID`) when
    one name has two different sources in the inventory (one lock per inventory)."""
    from rigkit.lockfile.document import source_of

    models: dict = {}
    owners: dict = {}
    for hs in host_specs:
        for name, model in hs.spec.models.items():
            if name in models and source_of(models[name]) != source_of(model):
                error(f"models.{name}: hosts {owners[name]} and {hs.name} declare different "
                      "sources; one lock per inventory needs one source per model name")
                sys.exit(exitcodes.INVALID)
            models.setdefault(name, model)
            owners.setdefault(name, hs.name)
    return models


def _lock_file(host_specs, inventory: str | None):
    """The one lock file of the hosts (:func:`rigkit.lockfile.path.lock_file_path`); exits 2 when their specs
    name different ones (``lockfile``): one command writes one lock."""
    from rigkit.lockfile.path import lock_file_path
    from rigkit.spec.inventory import default_inventory

    found = {hs.name: lock_file_path(hs.spec, inventory or default_inventory()) for hs in host_specs}
    if len(set(found.values())) > 1:
        error("lockfile: the hosts name different lock files (" + ", ".join(f"{n}: {p}" for n, p in found.items())
              + "); lock each with --host NAME")
        sys.exit(exitcodes.INVALID)
    return next(iter(found.values()))


def _human(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"


@click.group()
def models() -> None:
    """Lock the model weights to exact commits and files."""


@models.command()
@inventory_option
@host_option
def lock(inventory: str | None, hosts: tuple[str, ...]) -> None:
    """Resolve each model to a commit and its exact files; write the lock file (<inventory>.lock.json)."""
    from rigkit.lockfile.document import write_lock
    from rigkit.lockfile.errors import LockError
    from rigkit.lockfile.hub import lock_models

    host_specs = load_or_exit(inventory, hosts)
    wanted = models_of(host_specs)
    endpoints = {hs.spec.hf_endpoint for hs in host_specs}
    if len(endpoints) > 1:
        error(f"hosts declare different hf_endpoint values: {', '.join(map(str, endpoints))}")
        sys.exit(exitcodes.INVALID)
    target = _lock_file(host_specs, inventory)  # refused before the hub is asked anything
    try:
        result, skipped = lock_models(wanted, endpoint=endpoints.pop())
    except LockError as exc:
        error(str(exc))
        sys.exit(exitcodes.FAILED)
    for name in skipped:
        warn(f"models.{name}: source unset (operator-supplied repo_id or url + sha256); not locked")
    for name, entry in result["models"].items():
        src = entry["source"]
        what = f"{src['repo_id']}@{src['revision']} → {entry['commit']}" if "repo_id" in src else src["url"]
        err.print(f"{name}: {what}, {len(entry['files'])} file(s), {_human(entry['total_bytes'])}")
        if entry.get("header_bytes_fetched") is not None:  # the GGUF headers, by range requests
            err.print(f"  {name}: GGUF header(s) read with {_human(entry['header_bytes_fetched'])} of "
                      f"{_human(entry['total_bytes'])}")
    try:  # the other sections of the lock (rigkit lock's pins, images, release) stay as they are
        from rigkit.lockfile.document import load_lock

        result = {**load_lock(target), "models": result["models"]}
    except (OSError, ValueError):
        pass
    path = write_lock(result, target)
    err.print(f"wrote {path}")
    sys.exit(exitcodes.OK)


@models.command()
@inventory_option
@host_option
def check(inventory: str | None, hosts: tuple[str, ...]) -> None:
    """Compare the spec's models with the lock file (exit 2 when it must be re-locked)."""
    from rigkit.lockfile.document import load_lock
    from rigkit.lockfile.view import check_lock

    host_specs = load_or_exit(inventory, hosts)
    wanted = models_of(host_specs)
    path = _lock_file(host_specs, inventory)
    try:
        current = load_lock(path)
    except FileNotFoundError:
        error(f"{path}: no lock; run `{hints.command('models lock')}`")
        sys.exit(exitcodes.INVALID)
    except ValueError as exc:
        error(str(exc))
        sys.exit(exitcodes.INVALID)
    problems = check_lock(wanted, current, str(path))
    for p in problems:
        error(p)
    if not problems:
        err.print(f"{path}: matches the spec ({len(current['models'])} model(s))")
    sys.exit(exitcodes.INVALID if problems else exitcodes.OK)
