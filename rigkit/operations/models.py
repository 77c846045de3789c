"""Model weights: each locked model fetched and verified on the host by the host agent
(``rigkit-agent fetch``), HyperQwen's ``prepare`` run and its files recorded; nothing runs while
every record still matches."""

from __future__ import annotations


from pyinfra import host
from pyinfra.api import operation

from rigkit import paths
from rigkit.spec import members
from rigkit.operations.facts.agent import ModelStatus
from rigkit.operations.shell import argv


@operation()
def model_fetched(model: str, lock: str, endpoint: str | None, prepared: bool):
    """Fetch one locked model with the host agent unless its record says it is converged.

    + model: the model's name in the lock
    + lock: the lock's path on the host
    + endpoint: the hub (None: huggingface.co)
    + prepared: rewritten in place later (HyperQwen's base): never re-fetched over prepared files

    **Example:**

    .. code:: python

        from rigkit.operations.models import model_fetched
        model_fetched(
            name="Fetch and verify model strata",  # into /srv/models/strata/
            model="strata",
            lock="/var/lib/rigkit/models.lock.json",
            endpoint=None,
            prepared=False,
        )
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
    yield argv(*cmd)


@operation()
def hyperqwen_prepared(lock: str, models: list[str]):
    """Run HyperQwen's ``prepare`` (``NO_DOWNLOAD=1`` from its .env: it only uses what was
    fetched) and record the prepared files as the reference, unless the record is converged.

    **Example:**

    .. code:: python

        from rigkit.operations.models import hyperqwen_prepared
        hyperqwen_prepared(
            name="Run HyperQwen's prepare (NO_DOWNLOAD=1) and record its files",  # in /srv/models/hyperqwen/
            lock="/var/lib/rigkit/models.lock.json",
            models=["hyperqwen"],
        )
    """
    status = host.get_fact(ModelStatus, agent=paths.AGENT_BIN, lock=lock, names=models, prepared=models)
    if not any(status.values()):
        host.noop("HyperQwen's prepared files are recorded")
        return
    yield argv(*members.compose_base(None), "run", "--rm", "--no-deps", "prepare")
    for model in models:
        yield argv(paths.AGENT_BIN, "record", "--lock", lock, "--model", model)
