"""Secrets: ``/etc/rigkit/secrets/`` with the HF token (from the control machine) and a
``VLLM_API_KEY`` generated once on the host; neither value reaches any output, diff or op name."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import files, server

from rigkit import paths
from rigkit.operations.secrets import generated_secret, secret_env_file
from rigkit.render.declared_state import accounts, secret_files
from rigkit.spec.secrets import hf_token
from rigkit.spec.model import RigSpec


@deploy("Secrets")
def secrets(spec: RigSpec):
    """The ``llama-swap`` system user (it owns the member configs and reads the API key), then
    both secret files. Without an HF token on the control machine, hf.env is not written."""
    user = spec.llama_swap.user
    account = accounts(spec)[user]
    declared = secret_files(spec)
    server.group(name=f"Create the {user} group", group=account["group"], system=account["system"])
    server.user(name=f"Create the {user} system user", user=user, group=account["group"], groups=account["groups"],
                system=account["system"], home=account["home"], shell=account["shell"], create_home=True,
                ensure_home=True)
    # the one declaration of the folder's owner and mode (DESIGN.md "Secrets"): llama-swap reads
    # hyperqwen.env through it
    files.directory(name="Create /etc/rigkit/secrets (root:llama-swap 0750)", path=paths.SECRETS_DIR,
                    **declared[paths.SECRETS_DIR])
    token = hf_token()  # once per host's run of the deploy (pyinfra runs this role for each)
    if token:
        secret_env_file(name=f"Install the HF token from the control machine's {token.source}",
                        path=paths.HF_TOKEN_FILE, key="HF_TOKEN", value=token.value, **declared[paths.HF_TOKEN_FILE])
    generated_secret(name="Generate HyperQwen's VLLM_API_KEY once on the host", path=paths.HYPERQWEN_SECRET_FILE,
                     key="VLLM_API_KEY", **declared[paths.HYPERQWEN_SECRET_FILE])
