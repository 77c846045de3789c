"""Images from their registry: a tag → the digest the deploy pulls (``repository@sha256:…``), by the
OCI distribution spec's v2 API; a digest already given is verified to exist.

The exchange (OCI distribution-spec v1.1 "Pulling manifests"; the token flow of distribution's
``docs/spec/auth/token.md``, which ghcr.io follows for anonymous pulls):

1. ``HEAD /v2/<name>/manifests/<tag or digest>`` with ``Accept`` for the OCI image index, Docker's
   manifest list, the OCI image manifest and Docker's schema-2 manifest;
2. a ``401`` carries ``WWW-Authenticate: Bearer realm="https://ghcr.io/token",service="ghcr.io",
   scope="repository:<name>:pull"``: ``GET <realm>?service=<service>&scope=<scope>`` (no credentials)
   answers ``{"token": "…"}`` (distribution also allows ``access_token``), and step 1 is repeated with
   ``Authorization: Bearer <token>``;
3. the answer's ``Docker-Content-Digest`` is the digest (a ``GET`` of the manifest hashed with sha256
   when the header is missing) and its ``Content-Type`` says what it is: an **index** (multi-arch: OCI
   index or Docker manifest list; docker picks linux/amd64 from it on the rig, and the lock records that
   manifest's digest beside it, from the index's ``manifests[].platform``) or a single **manifest**.

The token is never written anywhere (it is anonymous, but a token is a token).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from rigkit.lockfile.errors import ResolveError, SourceUnreachable

MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
ACCEPT = ", ".join((MT_OCI_INDEX, MT_DOCKER_LIST, MT_OCI_MANIFEST, MT_DOCKER_MANIFEST))
INDEX_TYPES = (MT_OCI_INDEX, MT_DOCKER_LIST)
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_PARAM = re.compile(r'(\w+)="([^"]*)"')


def split_repository(repository: str) -> tuple[str, str]:
    """``ghcr.io/syv-ai/hyperqwen`` → ``("ghcr.io", "syv-ai/hyperqwen")``: the first component is the
    registry when it has a ``.`` or ``:`` or is ``localhost`` (docker's ``reference`` rule), else Docker
    Hub (``registry-1.docker.io``, ``library/`` before a one-part name)."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "registry-1.docker.io", repository if "/" in repository else f"library/{repository}"


def bearer_challenge(header: str) -> dict[str, str] | None:
    """The parameters of a ``WWW-Authenticate: Bearer k="v",…`` header (None for another scheme)."""
    scheme, _, params = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return dict(_PARAM.findall(params))


class Registry:
    """Look-ups in OCI registries through a ``requests.Session``; ``verify``: a CA bundle path (or True
    for the system's), passed with every request — a session's own ``verify`` loses to
    ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` in requests' merge of settings (psf/requests#3829)."""

    def __init__(self, session: Any, verify: str | bool = True):
        self.http = session
        self.verify = verify

    def _send(self, entry: str, method: str, url: str, headers: dict[str, str]) -> Any:
        import requests

        try:
            return self.http.request(method, url, headers=headers, timeout=30, allow_redirects=True, verify=self.verify)
        except requests.RequestException as exc:
            raise SourceUnreachable(f"{entry}: {url}: unreachable ({type(exc).__name__}: {exc})"[:400]) from None

    def _token(self, entry: str, challenge: dict[str, str], name: str) -> str:
        import requests

        realm = challenge.get("realm")
        if not realm:
            raise ResolveError(f"{entry}: the registry's Bearer challenge names no realm")
        params = {"service": challenge.get("service", ""), "scope": challenge.get("scope") or f"repository:{name}:pull"}
        try:
            resp = self.http.get(realm, params=params, timeout=30, verify=self.verify)
        except requests.RequestException as exc:
            raise SourceUnreachable(f"{entry}: token endpoint {realm}: unreachable ({type(exc).__name__})") from None
        if resp.status_code != 200:
            raise ResolveError(f"{entry}: token endpoint {realm} refused an anonymous token for {params['scope']} "
                               f"(HTTP {resp.status_code}); is the image public?")
        try:
            body = resp.json()
            return body.get("token") or body["access_token"]
        except (ValueError, KeyError, AttributeError):
            raise ResolveError(f"{entry}: token endpoint {realm} answered no token") from None

    def manifest(self, entry: str, base: str, name: str, ref: str, method: str = "HEAD") -> Any:
        """The registry's answer to ``<method> <base>/v2/<name>/manifests/<ref>``, through the token flow
        when challenged; raises :class:`ResolveError` for anything but 200."""
        url = f"{base.rstrip('/')}/v2/{name}/manifests/{ref}"
        headers = {"Accept": ACCEPT}
        resp = self._send(entry, method, url, headers)
        if resp.status_code == 401:
            challenge = bearer_challenge(resp.headers.get("WWW-Authenticate", ""))
            if challenge is None:
                raise ResolveError(f"{entry}: {url}: HTTP 401 without a Bearer challenge; the registry wants "
                                   "credentials rigkit does not send")
            headers["Authorization"] = f"Bearer {self._token(entry, challenge, name)}"
            resp = self._send(entry, method, url, headers)
        if resp.status_code == 404:
            raise ResolveError(f"{entry}: {base}: no manifest {name}:{ref} (HTTP 404): no such tag or digest")
        if resp.status_code in (401, 403):
            raise ResolveError(f"{entry}: {base} refused {name}:{ref} (HTTP {resp.status_code}) even with its "
                               "anonymous token")
        if resp.status_code != 200:
            raise ResolveError(f"{entry}: {url}: HTTP {resp.status_code}")
        return resp

    def resolve(self, entry: str, repository: str, ref: str, base: str | None = None) -> dict[str, Any]:
        """``repository`` at ``ref`` (a tag, or a digest to verify) → the lock entry ``{"repository",
        "ref", "digest", "kind": "index"|"manifest", "media_type", "amd64"}`` (``amd64``: the
        linux/amd64 manifest's digest of an index, None for a manifest). ``base`` overrides the
        registry's URL (default ``https://<registry>``). Raises :class:`ResolveError`."""
        registry, name = split_repository(repository)
        base = base or f"https://{registry}"
        resp = self.manifest(entry, base, name, ref)
        media = resp.headers.get("Content-Type", "").split(";")[0].strip()
        digest = resp.headers.get("Docker-Content-Digest")
        body = None
        if not digest or (media in INDEX_TYPES):
            body = self.manifest(entry, base, name, ref, method="GET").content
            digest = digest or "sha256:" + hashlib.sha256(body).hexdigest()
        if not DIGEST_RE.match(digest or ""):
            raise ResolveError(f"{entry}: {base} answered {digest!r} for {name}:{ref}, not a sha256 digest")
        if DIGEST_RE.match(ref) and digest != ref:
            raise ResolveError(f"{entry}: {base} serves {name}@{ref} as {digest}: the digest does not match")
        amd64 = None
        if media in INDEX_TYPES:
            try:
                manifests = json.loads(body)["manifests"]
            except (ValueError, KeyError, TypeError):
                raise ResolveError(f"{entry}: {base}: {name}:{ref} is an index without manifests") from None
            amd64 = next((m.get("digest") for m in manifests
                          if (m.get("platform") or {}).get("os") == "linux"
                          and (m.get("platform") or {}).get("architecture") == "amd64"), None)
            if amd64 is None:
                raise ResolveError(f"{entry}: {repository}:{ref} ({digest}) has no linux/amd64 image, what the rig runs")
        return {"repository": repository, "ref": ref, "digest": digest,
                "kind": "index" if media in INDEX_TYPES else "manifest", "media_type": media, "amd64": amd64}
