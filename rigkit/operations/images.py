"""Images pulled by the digest the lock resolved (``repository@sha256:…``), before anything runs them.
Docker itself checks a pull by digest: the manifest it receives must hash to the digest asked, and each
blob to the digest the manifest names (distribution's content addressing; ``docker pull`` fails with
"manifest verification failed for digest" or "filesystem layer verification failed" otherwise), so an
image that is not the locked one is refused here, naming the lock entry, instead of by a member that
fails to start later."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import FactBase, operation

from rigkit.operations.shell import script


class DockerImagePresent(FactBase):
    """Whether the engine has the image ``reference`` (``docker image inspect --format {{.Id}} REF``: the
    image id, nothing when absent); None when docker is not installed yet."""

    requires_command = "docker"

    def command(self, reference: str) -> str:
        return str(script("docker image inspect --format '{{{{.Id}}}}' {ref} 2>/dev/null || true", ref=reference))

    def process(self, output: list[str]) -> bool:
        return any(line.strip().startswith("sha256:") for line in output)


@operation()
def image_pulled(entry: str, reference: str):
    """Pull ``reference`` (``repository@sha256:<digest>``, from the lock) unless the engine has it.

    + entry: the lock entry it comes from (``images.strata``), named when the pull fails
    + reference: the pull reference, by digest

    **Example:**

    .. code:: python

        from rigkit.operations.images import image_pulled
        image_pulled(
            name="Pull the strata image by its locked digest",
            entry="images.strata",
            reference="ghcr.io/ggml-org/llama.cpp@sha256:91c07c9b141e5b272bf023a842e52db18ce40330ebfcb4f927c3b8cee87acc73",
        )
    """
    if host.get_fact(DockerImagePresent, reference=reference):
        host.noop(f"{entry}: {reference} present")
        return
    yield script('out=$(docker pull -q {ref} 2>&1) || {{ echo "lock entry {entry}: docker pull {ref} failed: $out" >&2; '
                 'exit 1; }}', ref=reference, entry=entry)
