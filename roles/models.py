"""Model weights: the locked files of every model fetched and verified on the host by the host
agent (``rigkit-agent fetch``), HyperQwen's ``prepare`` run with ``NO_DOWNLOAD=1`` and its files
recorded after it. Nothing runs when every model's record still matches (size and mtime)."""

from __future__ import annotations

from pyinfra.api import DeployError, deploy
from pyinfra.operations import files

from rigkit import hints, paths
from rigkit.render.declared_state import MODELS_LOCK_OWNER_MODE, PREPARED_MODELS, directories
from rigkit.lockfile.document import load_lock
from rigkit.lockfile.path import lock_file_path
from rigkit.lockfile.view import check_lock
from rigkit.operations.models import hyperqwen_prepared, model_fetched
from rigkit.spec.model import RigSpec

REMOTE_LOCK = paths.MODELS_LOCK


@deploy("Models")
def models(spec: RigSpec):
    """Upload the lock file (:func:`rigkit.lockfile.path.lock_file_path`), refuse a spec that no longer
    matches it ("re-lock"), fetch each model. Returns the operations that replace model files (each fetch,
    HyperQwen's prepare): when one changed, the members already running still serve the old weights (a
    llama.cpp server keeps the replaced file mapped, vLLM holds them in GPU memory), so the llama-swap role
    restarts llama-swap through the activation path (:func:`roles.llama_swap.llama_swap`)."""
    lock_path = lock_file_path(spec, hints.inventory())
    try:
        lock = load_lock(lock_path)
    except Exception as exc:  # missing or unreadable: say which file and what to run
        raise DeployError(f"{lock_path}: {exc}; run `{hints.command('models lock')}`") from None
    problems = check_lock(spec.models, lock, str(lock_path))
    if problems:
        raise DeployError("the spec no longer matches its lock:\n  " + "\n  ".join(problems))
    files.directory(name="Create /var/lib/rigkit", path=paths.STATE_DIR, **directories(spec)[paths.STATE_DIR])
    owner, mode = MODELS_LOCK_OWNER_MODE
    files.put(name="Install the model lock", src=str(lock_path), dest=REMOTE_LOCK, user=owner.split(":")[0],
              group=owner.split(":")[1], mode=mode.lstrip("0"), add_deploy_dir=False)
    replaced = [model_fetched(name=f"Fetch and verify model {name}", model=name, lock=REMOTE_LOCK,
                              endpoint=spec.hf_endpoint, prepared=name in PREPARED_MODELS)
                for name in sorted(lock["models"])]
    prepared = sorted(PREPARED_MODELS & set(lock["models"]))
    if prepared:
        replaced.append(hyperqwen_prepared(name="Run HyperQwen's prepare (NO_DOWNLOAD=1) and record its files",
                                           lock=REMOTE_LOCK, models=prepared))
    return replaced
