"""``rigkit lock``: resolve everything the rig fetches into ``<inventory>.lock.json``
(:mod:`rigkit.lockfile.resolve`; the models through :mod:`rigkit.lockfile.hub`, as ``rigkit models lock``).

- ``rigkit lock [-i PATH] [--host NAME]`` resolves what the lock lacks or records for something the spec
  no longer declares, keeps every other entry as it is (a second run changes nothing) and writes the
  lock. Exit 0 written; 1 a source failed (nothing written); 2 invalid inventory, or hosts declaring one
  entry differently. A source that does not answer at all (offline) is answered by :func:`offline`: nothing
  written, every server the lock needs, and how to lock on a machine that reaches them.
- ``rigkit lock --update [NAME…]`` asks the sources again for the named entries (a pin's package, an
  image's section ``hyperqwen``/``strata``/``gguf_baseline``, ``llama_swap``; none named: all of them)
  and prints what would change, ``old → new`` per entry; ``--write`` writes it. Exit 0 nothing newer or
  written; 3 newer versions shown, not written.
"""

from __future__ import annotations

import os
import sys

import click

from rigkit import exitcodes, hints
from rigkit.cli.common import err, error, host_option, inventory_option, load_or_exit, parse_data
from rigkit.cli.models import models_of


def _one_declaration(host_specs) -> None:
    """Exit 2 when two hosts of the inventory declare one lock entry differently (one lock per inventory)."""
    from rigkit.lockfile.view import image_source, declared_images, declared_pins

    def declared(spec):
        return {**{f"pins.{p}": w[0] for p, w in declared_pins(spec).items()},
                **{f"images.{n}": image_source(i) for n, i in declared_images(spec).items()},
                "llama_swap": (spec.llama_swap.version, spec.llama_swap.release_url, spec.llama_swap.release_sha256),
                "arch_archive_url": spec.arch_archive_url}

    first = host_specs[0]
    for hs in host_specs[1:]:
        a, b = declared(first.spec), declared(hs.spec)
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                error(f"{key}: hosts {first.name} and {hs.name} declare it differently; one lock "
                      "per inventory needs one declaration per entry")
                sys.exit(exitcodes.INVALID)


def model_sources(spec, wanted: dict) -> list[tuple[str, str]]:
    """``[(models.NAME, server)]`` for every model ``wanted`` declares a source for: its URL's server, or
    the hub (``hf_endpoint``, else ``$HF_ENDPOINT``, else huggingface.co, as the lock asks it), as
    :func:`rigkit.lockfile.resolve.origin` (no credentials)."""
    from rigkit.lockfile.document import source_of
    from rigkit.lockfile.resolve import origin

    hub = origin(str(spec.hf_endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"))
    out = []
    for name in sorted(wanted):
        src = source_of(wanted[name])
        if src is not None:
            out.append((f"models.{name}", origin(src["url"]) if "url" in src else hub))
    return out


def offline(path: str, existed: bool, asked: list[tuple[str, str]], data: tuple[str, ...]) -> list[str]:
    """The lines ``rigkit lock`` says after a source did not answer at all: what was written (nothing:
    ``path`` as it was, or still absent), every server the run needed and the entries it needed each for
    (``asked``: :func:`rigkit.lockfile.resolve.sources_asked` and :func:`model_sources`), and how to lock on a
    machine that reaches them and bring the lock here (``data``: the run's ``--data``, to be given there too)."""
    lines = [f"nothing written: {path} " + ("is as it was" if existed else "still does not exist")]
    by_server: dict[str, list[str]] = {}
    for entry, server in asked:
        by_server.setdefault(server, []).append(entry)
    lines.append(f"this lock needs the network for {len(asked)} entr{'y' if len(asked) == 1 else 'ies'} "
                 f"from {len(by_server)} server(s):")
    lines += [f"  {server}: {', '.join(entries)}" for server, entries in sorted(by_server.items())]
    lines.append(f"to lock elsewhere: on a machine that reaches them, in a checkout with this inventory and its "
                 f"group_data, run `{hints.command('lock')}`" + (" with the same --data" if data else "")
                 + (" (HF_TOKEN set there for a private or gated model repo)" if any(e.startswith("models.") for e, _ in asked)
                    else "") + f"; copy the {path} it writes to {path} here; `{hints.command('check')}` then says "
                 "whether it matches the spec")
    return lines


def _describe(section: str, name: str, entry: dict) -> str:
    if section == "pins":
        sig = "signature " + ("beside it" if entry.get("sig_url") else "none in the archive")
        return f"pins.{name}: {entry['want']} → {entry['version']} (sha256 {entry['sha256'][:12]}… from {entry['repo_db']}; {sig})"
    if section == "images":
        extra = f", linux/amd64 {entry['amd64']}" if entry.get("amd64") else ""
        return f"images.{name}: {entry['repository']}:{entry['ref']} → {entry['digest']} ({entry['kind']}{extra})"
    return f"llama_swap: {entry['version']} → sha256 {entry['sha256']} (from {entry['from']})"


@click.command("lock")
@inventory_option
@host_option
@click.option("--update", is_flag=True, help="ask the sources again for NAME… (all when none) and show old → new")
@click.option("--write", is_flag=True, help="with --update: write the newer versions")
@click.option("--data", "data", metavar="KEY=VALUE", multiple=True, help="override a spec key, as pyinfra --data "
              "(lock a variant; give the same --data to the deploy, and lockfile=PATH to keep its lock apart)")
@click.argument("names", nargs=-1)
def lock(inventory: str | None, hosts: tuple[str, ...], update: bool, write: bool, data: tuple[str, ...],
         names: tuple[str, ...]) -> None:
    """Resolve the pins, images, llama-swap release and models into <inventory>.lock.json."""
    from rigkit.lockfile.document import diff, load_lock, write_lock
    from rigkit.lockfile.errors import (LockError, LockFormatError, ModelSourceUnreachable, ResolveError,
                                        SourceUnreachable)
    from rigkit.lockfile.hub import lock_models
    from rigkit.lockfile.path import lock_file_path
    from rigkit.lockfile.resolve import lock_sections, sources_asked
    from rigkit.lockfile.view import check_lock, declared_images, declared_pins
    from rigkit.spec.inventory import default_inventory

    if names and not update:
        error("NAME… is for --update (rigkit lock alone resolves what the lock lacks)")
        sys.exit(exitcodes.INVALID)
    if write and not update:
        error("--write is for --update (rigkit lock alone always writes)")
        sys.exit(exitcodes.INVALID)
    inv = inventory or default_inventory()
    host_specs = load_or_exit(inventory, hosts, parse_data(data), resolve_lock=False)
    _one_declaration(host_specs)
    spec = host_specs[0].spec
    known = {*declared_pins(spec), *declared_images(spec), "llama_swap"}
    unknown = [n for n in names if n not in known]
    if unknown:
        error(f"--update {', '.join(unknown)}: no such lock entry (entries: {', '.join(sorted(known))})")
        sys.exit(exitcodes.INVALID)
    path = str(lock_file_path(spec, inv))
    existed = True
    try:
        current = load_lock(path)
    except FileNotFoundError:
        current, existed = {"version": 2, "models": {}}, False
    except LockFormatError as exc:
        for p in exc.problems:
            error(p)
        sys.exit(exitcodes.INVALID)

    wanted = models_of(host_specs)
    try:
        sections = lock_sections(spec, current, update=list(names) if update else None)
        models = current.get("models", {})
        if check_lock(wanted, current):  # a model missing or stale: the models are re-locked as `models lock` does
            models = lock_models(wanted, endpoint=spec.hf_endpoint)[0]["models"]
    except (ResolveError, LockError) as exc:
        error(str(exc))
        if isinstance(exc, (SourceUnreachable, ModelSourceUnreachable)):  # offline: say all it needs, and how else
            asked = sources_asked(spec, current, update=list(names) if update else None)
            asked += model_sources(spec, wanted) if check_lock(wanted, current) else []
            for line in offline(path, existed, asked, data):
                err.print(line)
        else:
            err.print(f"nothing written: {path} " + ("is as it was" if existed else "still does not exist"))
        sys.exit(exitcodes.FAILED)
    new = {"version": 2, "models": models, **sections}
    for section in ("pins", "images"):
        for name, entry in new[section].items():
            err.print(_describe(section, name, entry))
    err.print(_describe("llama_swap", "", new["llama_swap"]))
    changes = diff(current, new)
    if update:
        for line in changes:
            out_line = f"  {line}"
            err.print(out_line)
        if not changes:
            err.print(f"{path}: nothing newer")
            sys.exit(exitcodes.OK)
        if not write:
            err.print(f"{len(changes)} entr{'y' if len(changes) == 1 else 'ies'} would change; `--write` writes them")
            sys.exit(exitcodes.FINDINGS)
    if new == current:
        err.print(f"{path}: unchanged")
        sys.exit(exitcodes.OK)
    write_lock(new, path)
    err.print(f"wrote {path}" + (f" ({len(changes)} entr{'y' if len(changes) == 1 else 'ies'} changed)" if changes else ""))
    sys.exit(exitcodes.OK)
