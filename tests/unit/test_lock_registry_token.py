"""rigkit lock's registry look-up against the real registry behind the token flow ghcr.io uses: Debian's
docker-registry (distribution 2.8, the sandbox's registry binary, tests/harness/debs.py) configured with
``auth: token:`` (realm, service, issuer, rootcertbundle — distribution's docs/configuration.md "token"),
on 127.0.0.1, and a token server here that issues the JWTs distribution verifies
(``registry/auth/token/token.go``: RS256 signed, the signing certificate in the ``x5c`` header chaining to
``rootcertbundle``, claims ``iss``, ``aud`` = the service, ``exp``/``nbf``, ``access`` [{type, name,
actions}]). Anonymous, as ghcr.io's public images: the token server grants ``pull`` on every repository
except ``private/*`` (an empty ``access``: the registry then refuses, HTTP 401 ``insufficient_scope``).
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import hashlib
import http.server
import io
import json
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
import requests

from rigkit.lockfile.errors import ResolveError
from rigkit.lockfile.registry import MT_DOCKER_MANIFEST, Registry

HARNESS = Path(__file__).resolve().parents[1] / "harness"
SERVICE, ISSUER = "rigkit-test-registry", "rigkit-test-token-issuer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenIssuer:
    """Signs distribution tokens with an RSA key whose self-signed certificate is the registry's rootcertbundle."""

    def __init__(self, workdir: Path):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
        now = dt.datetime.now(dt.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
                     .not_valid_after(now + dt.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.bundle = workdir / "token-ca.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self._der = self.cert.public_bytes(serialization.Encoding.DER)

    def token(self, scope: str, grant: bool) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        access = []
        if grant and scope:
            kind, name, actions = scope.split(":", 2)
            access = [{"type": kind, "name": name, "actions": actions.split(",")}]
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(self._der).decode()]}
        claims = {"iss": ISSUER, "sub": "", "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": hashlib.sha256(f"{now}{scope}".encode()).hexdigest()[:16], "access": access}
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        sig = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64(sig)}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory):
    sys.path.insert(0, str(HARNESS))
    import debs

    binary = debs.unpacked("registry") / "docker-registry" / "usr/bin/docker-registry"
    work = tmp_path_factory.mktemp("token-registry")
    issuer = TokenIssuer(work)
    asked: list[str] = []

    class Tokens(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            scope = (q.get("scope") or [""])[0]
            asked.append(scope)
            body = json.dumps({"token": issuer.token(scope, grant=":private/" not in scope)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    tokens = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tokens)
    threading.Thread(target=tokens.serve_forever, daemon=True).start()
    realm = f"http://127.0.0.1:{tokens.server_address[1]}/token"
    port = _free_port()
    conf = work / "config.yml"
    conf.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {work / 'data'}\n"
                    f"http:\n  addr: 127.0.0.1:{port}\nauth:\n  token:\n    realm: {realm}\n    service: {SERVICE}\n"
                    f"    issuer: {ISSUER}\n    rootcertbundle: {issuer.bundle}\n")
    log = open(work / "registry.log", "w")
    proc = subprocess.Popen([str(binary), "serve", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            requests.get(f"{base}/v2/", timeout=1)
            break
        except requests.ConnectionError:
            time.sleep(0.1)
    try:
        yield base, issuer, asked
    finally:
        proc.terminate()
        proc.wait(10)
        tokens.shutdown()


def _push(base: str, issuer: TokenIssuer, name: str, tag: str) -> str:
    """Push a one-layer schema-2 image through the registry's API with a push token; its manifest digest."""
    auth = {"Authorization": f"Bearer {issuer.token(f'repository:{name}:pull,push', True)}"}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [
        "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()]}}).encode()
    for blob in (layer, config):
        start = requests.post(f"{base}/v2/{name}/blobs/uploads/", headers=auth, timeout=10)
        assert start.status_code == 202, start.text
        loc = urllib.parse.urljoin(base, start.headers["Location"])
        sep = "&" if "?" in loc else "?"
        put = requests.put(f"{loc}{sep}digest=sha256:{hashlib.sha256(blob).hexdigest()}", data=blob, timeout=10,
                           headers={**auth, "Content-Type": "application/octet-stream"})
        assert put.status_code == 201, put.text
    manifest = json.dumps({"schemaVersion": 2, "mediaType": MT_DOCKER_MANIFEST,
                           "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                                      "size": len(config), "digest": "sha256:" + hashlib.sha256(config).hexdigest()},
                           "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                                       "size": len(layer), "digest": "sha256:" + hashlib.sha256(layer).hexdigest()}]}).encode()
    put = requests.put(f"{base}/v2/{name}/manifests/{tag}", data=manifest, timeout=10,
                       headers={**auth, "Content-Type": MT_DOCKER_MANIFEST})
    assert put.status_code == 201, put.text
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def test_the_real_registry_behind_the_token_flow_resolves_a_tag_and_refuses_what_it_must(token_registry):
    base, issuer, asked = token_registry
    digest = _push(base, issuer, "syv-ai/hyperqwen", "sha-1a2b3c4")
    assert requests.head(f"{base}/v2/syv-ai/hyperqwen/manifests/sha-1a2b3c4", timeout=5).status_code == 401
    reg = Registry(requests.Session())
    got = reg.resolve("images.hyperqwen", "ghcr.io/syv-ai/hyperqwen", "sha-1a2b3c4", base)
    assert (got["digest"], got["kind"], got["media_type"]) == (digest, "manifest", MT_DOCKER_MANIFEST)
    assert "repository:syv-ai/hyperqwen:pull" in asked  # the scope the registry's challenge named
    assert reg.resolve("images.hyperqwen", "ghcr.io/syv-ai/hyperqwen", digest, base)["digest"] == digest
    with pytest.raises(ResolveError) as exc:
        reg.resolve("images.hyperqwen", "ghcr.io/syv-ai/hyperqwen", "no-such-tag", base)
    assert str(exc.value) == f"images.hyperqwen: {base}: no manifest syv-ai/hyperqwen:no-such-tag (HTTP 404): no such tag or digest"
    _push(base, issuer, "private/image", "v1")
    with pytest.raises(ResolveError) as exc:
        reg.resolve("images.strata", "ghcr.io/private/image", "v1", base)
    assert str(exc.value) == (f"images.strata: {base} refused private/image:v1 (HTTP 401) even with its anonymous token")
