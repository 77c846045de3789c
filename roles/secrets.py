"""Secrets: ``/etc/rigkit/secrets/`` with the HF token (from the control machine) and a
``VLLM_API_KEY`` generated once on the host; neither value reaches any output, diff or op name."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import files, server

from rigkit import paths
from rigkit.operations.secrets import generated_secret, secret_env_file
from rigkit.spec.secrets import hf_token_source, read_hf_token
from rigkit.spec.model import RigSpec


@deploy("Secrets")
def secrets(spec: RigSpec):
    """The ``llama-swap`` system user (it owns the member configs and reads the API key), then
    both secret files. Without an HF token on the control machine, hf.env is not written."""
    user = spec.llama_swap.user
    server.group(name=f"Create the {user} group", group=user, system=True)
    server.user(name=f"Create the {user} system user", user=user, group=user, groups=["docker"], system=True,
                home=f"/var/lib/{user}", shell="/usr/bin/nologin", create_home=True, ensure_home=True)
    # the one declaration of the folder's owner and mode (DESIGN.md "Secrets"): llama-swap reads
    # hyperqwen.env through it
    files.directory(name="Create /etc/rigkit/secrets (root:llama-swap 0750)", path=paths.SECRETS_DIR, user="root",
                    group=user, mode="750")
    token = read_hf_token()
    if token:
        secret_env_file(name=f"Install the HF token from the control machine's {hf_token_source()}",
                        path=paths.HF_TOKEN_FILE, key="HF_TOKEN", value=token, user="root", group="root", mode="600")
    generated_secret(name="Generate HyperQwen's VLLM_API_KEY once on the host", path=paths.HYPERQWEN_SECRET_FILE,
                     key="VLLM_API_KEY", user="root", group=user, mode="640")
