"""What is declared for one host (:class:`Declared`), from its RigSpec and the model lock;
nothing here touches the host."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigkit import paths


@dataclass
class Declared:
    """The declared state of one host, from its RigSpec (nothing here touches the host).

    ``files``: ``{path: RenderedFile}`` (:func:`rigkit.render.files.render`); ``secrets``: ``{path:
    (owner "user:group", mode "0640", sha256 of the wanted content or None)}``; ``units``:
    ``{unit: {"enabled": bool | None, "active": bool | None}}`` (None: not checked), plus
    ``installed_only`` (must exist, must not be enabled) and ``legacy`` units; ``members``: unit
    names llama-swap must not be tied to; ``lock``: the model lock (dict) or None with
    ``lock_note`` saying why; ``generation``: the held generation this is (None: the spec).
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
    generation: int | None = None


def lock_for(spec: Any, inventory: str) -> tuple[dict[str, Any] | None, str | None]:
    """The model lock declared for ``inventory``: ``spec.models_lock`` when set, else the file
    ``rigkit models lock`` writes beside the inventory (:func:`rigkit.spec.modellock.lock_path_for`).
    Returns ``(lock, None)`` or ``(None, why not)``; never raises for a missing or bad file."""
    from rigkit.spec.modellock import load_lock, lock_path_for

    path = Path(getattr(spec, "models_lock", None) or lock_path_for(inventory))
    if not path.is_file():
        return None, f"no model lock at {path} (run `rigkit models lock -i {inventory}`); model files not checked"
    try:
        return load_lock(path), None
    except Exception as exc:  # noqa: BLE001 - any unreadable lock is reported, never a crash
        return None, f"model lock {path} unreadable ({exc}); model files not checked"


def declared_for(name: str, spec: Any, inventory: str, hf_token: str | None,
                 files: dict[str, Any] | None = None, generation: int | None = None) -> Declared:
    """Everything drift compares for host ``name``: rendered files, secret files, units (DESIGN.md
    "Host paths and units"), pinned packages, the model lock. ``hf_token`` is the value at hand
    on the control machine (:func:`rigkit.spec.secrets.read_hf_token`) or None. ``files`` replaces the
    rendered spec (a held ``generation``'s stored files, :func:`rigkit.deploy.generations.source_from_bundle`)."""
    from rigkit.spec import members as members_mod
    from rigkit.render.files import AGENT_TIMERS, render

    files = render(spec) if files is None else files
    ls_group = spec.llama_swap.user
    secrets: dict[str, tuple[str, str, str | None]] = {
        # the folder too: one owner and mode (llama-swap reads hyperqwen.env through it)
        paths.SECRETS_DIR: (f"root:{ls_group}", "0750", None),
        paths.HYPERQWEN_SECRET_FILE: (f"root:{ls_group}", "0640", None),
    }
    if hf_token:
        secrets[paths.HF_TOKEN_FILE] = ("root:root", "0600", hashlib.sha256(f"HF_TOKEN={hf_token}\n".encode()).hexdigest())
    else:  # not at hand: presence is not required, owner and mode are checked when it is there
        secrets[paths.HF_TOKEN_FILE] = ("root:root", "0600", "")
    units: dict[str, dict[str, bool | None]] = {
        "llama-swap.service": {"enabled": True, "active": True},
        "gpu-power-limit.service": {"enabled": True, "active": None},
        "docker.service": {"enabled": True, "active": True},
        "nvidia-persistenced.service": {"enabled": True, "active": True},
    }
    for stem in AGENT_TIMERS:
        units[f"{stem}.timer"] = {"enabled": True, "active": True}
    try:
        member_ids = list(members_mod.resolve_members(spec))
    except Exception:  # noqa: BLE001 - an unresolvable member is the spec's problem, reported by check
        member_ids = []
    members = sorted({*spec.legacy_units, "hyperqwen.service", *(f"{m}.service" for m in member_ids)})
    packages = sorted({*(spec.pacman_pins or {}), spec.driver_flavour, "nvidia-utils", "cuda"})
    lock, note = lock_for(spec, inventory)
    return Declared(host=name, spec=spec, files=files, secrets=secrets, units=units,
                    installed_only=["hyperqwen.service"], legacy=list(spec.legacy_units), members=members,
                    packages=packages, lock=lock, lock_note=note, secret_values=[hf_token] if hf_token else [],
                    generation=generation)
