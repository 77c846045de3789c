"""What is declared for one host (:class:`Declared`), from its RigSpec and the model lock;
nothing here touches the host."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from rigkit import hints, paths
from rigkit.spec.secrets import HfToken


@dataclass
class Declared:
    """The declared state of one host, from its RigSpec (nothing here touches the host).

    ``files``: ``{path: RenderedFile}`` (:func:`rigkit.render.files.render`); ``secrets``: ``{path:
    (owner "user:group", mode "0640", sha256 of the wanted content or None)}``; ``units``:
    ``{unit: {"enabled": bool | None, "active": bool | None}}`` (None: not checked), plus
    ``installed_only`` (must exist, must not be enabled) and ``legacy`` units (backed up in
    :data:`rigkit.render.declared_state.LEGACY_BACKUP_DIR`); ``members``: unit names llama-swap must not be tied to; ``lock``: the
    model lock (dict) or None with ``lock_note`` saying why; ``secret_values``: the secrets at hand
    (masked out of every finding); ``token_source``: where the HF token at hand came from (words, for
    a finding), None without one; ``generation``: the held generation this is (None: the spec). ``uploads``: files the deploy installs that are not rendered ones (the staged
    live config, the model lock; ``{path: RenderedFile}``); ``directories``/``accounts``: as
    :func:`rigkit.render.declared_state.directories`/``accounts``; ``packages`` holds the pinned and
    the repo packages (``repo_packages``: installed at any version); ``release_sha256``: the
    llama-swap tarball its binary must come from; ``if_present``: units enabled and active when the
    host has them (the toolkit's CDI refresh).
    """

    host: str
    spec: Any
    files: dict[str, Any]
    secrets: dict[str, tuple[str, str, str | None]]
    units: dict[str, dict[str, bool | None]]
    installed_only: list[str]
    legacy: list[str]
    members: list[str]
    packages: list[str]
    lock: dict[str, Any] | None = None
    lock_note: str | None = None
    secret_values: list[str] = field(default_factory=list)
    token_source: str | None = None
    generation: int | None = None
    uploads: dict[str, Any] = field(default_factory=dict)
    directories: dict[str, dict[str, str]] = field(default_factory=dict)
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)
    repo_packages: list[str] = field(default_factory=list)
    release_sha256: str | None = None
    if_present: list[str] = field(default_factory=list)


def declared_lock_file(spec: Any, inventory: str) -> tuple[dict[str, Any] | None, str | None, bytes | None]:
    """The lock file declared for ``spec`` loaded from ``inventory``
    (:func:`rigkit.lockfile.path.lock_file_path`). Returns ``(lock, None, the file's bytes — what the deploy
    uploads)`` or ``(None, why not, None)``; never raises for a missing or bad file."""
    from rigkit.lockfile.document import load_lock
    from rigkit.lockfile.path import lock_file_path

    path = lock_file_path(spec, inventory)
    if not path.is_file():
        relock = hints.command("models lock", inventory_path=str(inventory))
        return None, f"no model lock at {path} (run `{relock}`); model files not checked", None
    try:
        return load_lock(path), None, path.read_bytes()
    except Exception as exc:  # noqa: BLE001 - any unreadable lock is reported, never a crash
        return None, f"model lock {path} unreadable ({exc}); model files not checked", None


def declared_for(name: str, spec: Any, inventory: str, hf_token: HfToken | None,
                 files: dict[str, Any] | None = None, generation: int | None = None) -> Declared:
    """Everything drift compares for host ``name``: rendered files, secret files, units (DESIGN.md
    "Host paths and units"), pinned packages, the model lock. ``hf_token`` is the token at hand
    on the control machine, as the command read it once (:func:`rigkit.spec.secrets.hf_token`), or None. ``files`` replaces the
    rendered spec (a held ``generation``'s stored files, :func:`rigkit.render.generations.source_from_bundle`)."""
    from rigkit.render import declared_state
    from rigkit.render.files import RenderedFile, render
    from rigkit.spec import members as members_mod

    files = render(spec) if files is None else files

    def owner_mode(d: dict[str, str]) -> tuple[str, str]:
        return f"{d['user']}:{d['group']}", "0" + d["mode"].lstrip("0")

    declared_secrets = declared_state.secret_files(spec)
    secrets: dict[str, tuple[str, str, str | None]] = {}
    for path, d in declared_secrets.items():
        # the folder too: one owner and mode (llama-swap reads hyperqwen.env through it)
        secrets[path] = (*owner_mode(d), None)
    if hf_token:
        secrets[paths.HF_TOKEN_FILE] = (*owner_mode(declared_secrets[paths.HF_TOKEN_FILE]),
                                        hashlib.sha256(f"HF_TOKEN={hf_token.value}\n".encode()).hexdigest())
    else:  # not at hand: presence is not required, owner and mode are checked when it is there
        secrets[paths.HF_TOKEN_FILE] = (*owner_mode(declared_secrets[paths.HF_TOKEN_FILE]), "")
    units: dict[str, dict[str, bool | None]] = {
        unit: {"enabled": True, "active": active} for unit, active in declared_state.enabled_units(spec).items()}
    try:
        member_ids = list(members_mod.resolve_members(spec))
    except Exception:  # noqa: BLE001 - an unresolvable member is the spec's problem, reported by check
        member_ids = []
    members = sorted({*spec.legacy_units, "hyperqwen.service", *(f"{m}.service" for m in member_ids)})
    repo = sorted(declared_state.REPO_PACKAGES)
    packages = sorted({*(spec.pacman_pins or {}), spec.driver_flavour, "nvidia-utils", "cuda", *repo})
    lock, note, lock_bytes = declared_lock_file(spec, inventory)
    uploads: dict[str, Any] = {}
    live = files.get(paths.LLAMA_SWAP_CONFIG)
    if live is not None:
        uploads[paths.LLAMA_SWAP_NEXT] = RenderedFile(live.text, declared_state.STAGING_OWNER_MODE[1],
                                                      declared_state.STAGING_OWNER_MODE[0])
    if lock_bytes is not None:
        uploads[paths.MODELS_LOCK] = RenderedFile(lock_bytes.decode("utf-8", errors="replace"),
                                                  declared_state.MODELS_LOCK_OWNER_MODE[1],
                                                  declared_state.MODELS_LOCK_OWNER_MODE[0])
    return Declared(host=name, spec=spec, files=files, secrets=secrets, units=units,
                    installed_only=["hyperqwen.service"], legacy=list(spec.legacy_units), members=members,
                    packages=packages, lock=lock, lock_note=note, secret_values=[hf_token.value] if hf_token else [],
                    token_source=hf_token.source if hf_token else None,
                    generation=generation, uploads=uploads, directories=declared_state.directories(spec),
                    accounts=declared_state.accounts(spec), repo_packages=repo,
                    release_sha256=getattr(spec.llama_swap, "release_sha256", None),
                    if_present=[declared_state.CDI_REFRESH])
