"""Shared values for the model tests: the test hub's token and the models pointed at it."""

from __future__ import annotations

from pathlib import Path

from tests.hub import repos

#: The token the test hub accepts. Tests assert it never shows up in output, files or records.
TOKEN = "hf_rigkitTEST0secret0value0do0not0print"
WRONG_TOKEN = "hf_rigkitWRONG0secret0value0do0not0print"


def model_sources():
    """The spec's default models with the operator-supplied repos pointed at the test hub's
    (``hyperqwen`` keeps the spec default, which the test hub serves too)."""
    from rigkit.spec.model import _default_models

    models = _default_models()
    for name, repo_id in (("hyperqwen-dflash2", repos.DFLASH2), ("gguf-baseline", repos.GGUF),
                          ("strata", repos.STRATA)):
        models[name] = models[name].model_copy(update={"repo_id": repo_id})
    return models


def repo_bytes(hub_server, repo_id: str, path: str) -> bytes:
    """The bytes of ``path`` at ``repo_id``'s original commit."""
    repo = hub_server.hub.repos[repo_id]
    return next(iter(repo.commits.values()))[path].data


def all_text(*roots: Path) -> str:
    """Every file's text under ``roots`` (undecodable bytes replaced), to look for the token."""
    out = []
    for root in roots:
        for p in Path(root).rglob("*"):
            if p.is_file():
                out.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


def bridge_path(hub_server, repo_id: str, path: str) -> str:
    """The path of the LFS bridge URL the hub's ``resolve`` redirects ``path`` to (its bytes)."""
    from tests.hub.server import repo_object_id, xet_hash

    return f"/xet-bridge-us/{repo_object_id(repo_id)}/{xet_hash(repo_bytes(hub_server, repo_id, path))}"


def xet_requests(hub_server) -> list[dict]:
    """Logged requests only the Xet path makes: the token route and anything sent to the CAS."""
    return [r for r in hub_server.hub.requests() if r["role"] == "cas" or "/xet-read-token/" in r["path"]]
