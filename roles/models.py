"""Model weights: the locked files of every model fetched and verified on the host by the host
agent (``rigkit-agent fetch``), HyperQwen's ``prepare`` run with ``NO_DOWNLOAD=1`` and its files
recorded after it. Nothing runs when every model's record still matches (size and mtime)."""

from __future__ import annotations

import shlex
from pathlib import Path

from pyinfra import host
from pyinfra.api import DeployError, deploy, operation
from pyinfra.operations import files

from rigkit import members, paths
from rigkit.facts import ModelStatus
from rigkit.hoststate import PREPARED_MODELS
from rigkit.models import check_lock, load_lock
from rigkit.spec import RigSpec

REMOTE_LOCK = f"{paths.STATE_DIR}/models.lock.json"


@operation()
def model_fetched(model: str, lock: str, endpoint: str | None, prepared: bool):
    """Fetch one locked model with the host agent unless its record says it is converged.

    + model: the model's name in the lock
    + lock: the lock's path on the host
    + endpoint: the hub (None: huggingface.co)
    + prepared: rewritten in place later (HyperQwen's base): never re-fetched over prepared files
    """
    reasons = host.get_fact(ModelStatus, agent=paths.AGENT_BIN, lock=lock, names=[model])[model]
    if prepared:  # "not prepared yet" is the prepare step's business, not the fetch's
        reasons = [r for r in reasons if "not prepared yet" not in r]
    if not reasons:
        host.noop(f"model {model} is in place and recorded")
        return
    cmd = [paths.AGENT_BIN, "fetch", "--lock", lock, "--model", model, "--progress", "lines"]
    if endpoint:
        cmd += ["--endpoint", endpoint]
    if prepared:
        cmd.append("--prepared")
    yield shlex.join(cmd)


@operation()
def hyperqwen_prepared(lock: str, models: list[str]):
    """Run HyperQwen's ``prepare`` (``NO_DOWNLOAD=1`` from its .env: it only uses what was
    fetched) and record the prepared files as the reference, unless the record is converged."""
    status = host.get_fact(ModelStatus, agent=paths.AGENT_BIN, lock=lock, names=models, prepared=models)
    if not any(status.values()):
        host.noop("HyperQwen's prepared files are recorded")
        return
    yield shlex.join([*members.compose_base(None), "run", "--rm", "--no-deps", "prepare"])
    for model in models:
        yield shlex.join([paths.AGENT_BIN, "record", "--lock", lock, "--model", model])


@deploy("Models")
def models(spec: RigSpec):
    """Upload the lock, refuse a spec that no longer matches it ("re-lock"), fetch each model."""
    if spec.models_lock is None:
        raise DeployError("models_lock is unset: set it in the inventory (the file `rigkit models lock` writes)")
    lock_path = Path(spec.models_lock)
    try:
        lock = load_lock(lock_path)
    except Exception as exc:  # missing or unreadable: say which file and what to run
        raise DeployError(f"{lock_path}: {exc}; run `rigkit models lock -i <inventory>`") from None
    problems = check_lock(spec.models, lock, str(lock_path))
    if problems:
        raise DeployError("the spec no longer matches its lock:\n  " + "\n  ".join(problems))
    files.directory(name="Create /var/lib/rigkit", path=paths.STATE_DIR, user="root", group="root", mode="755")
    files.put(name="Install the model lock", src=str(lock_path), dest=REMOTE_LOCK, user="root", group="root",
              mode="644", add_deploy_dir=False)
    for name in sorted(lock["models"]):
        model_fetched(name=f"Fetch and verify model {name}", model=name, lock=REMOTE_LOCK,
                      endpoint=spec.hf_endpoint, prepared=name in PREPARED_MODELS)
    prepared = sorted(PREPARED_MODELS & set(lock["models"]))
    if prepared:
        hyperqwen_prepared(name="Run HyperQwen's prepare (NO_DOWNLOAD=1) and record its files", lock=REMOTE_LOCK,
                           models=prepared)
