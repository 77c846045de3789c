#!/usr/bin/env python3
"""The sandbox's container images, built without ``docker build`` and pushed to its registry.

No engine runs on the control machine, so each image is assembled here as Docker's image
format v2 (schema 2 manifest, gzip'ed tar layers, a config whose ``rootfs.diff_ids`` are the
sha256 of each uncompressed layer) and pushed with the registry HTTP API v2 (monolithic blob
upload: ``POST /v2/<name>/blobs/uploads/`` then ``PUT <location>?digest=``; ``PUT
/v2/<name>/manifests/<tag>``). The deploy then pulls each by the digest :func:`publish` returns,
exactly as on the rig (``image@sha256:<manifest digest>``).

Images (their layers are reproducible: fixed mtimes, owners and order, so a digest changes only
when an input does):

- ``ghcr.io/ggml-org/llama.cpp:server-cuda`` — llama.cpp's own server (the ``xllamacpp`` wheel's
  build of llama.cpp, from the project's venv) in a minimal root (Debian 12's Python 3.11 and the
  C/C++ runtime, :data:`debs.IMAGE_DEBS`); ``ENTRYPOINT ["/app/llama-server"]``, ``WORKDIR /app``
  like upstream's ``.devops/cuda.Dockerfile`` ``server`` stage. ``/app/llama-server`` takes
  llama-server's flags (``-m``, ``--host``, ``--port``, ``-a/--alias``, ``-c``, ``-t``; the others
  are accepted and ignored) and fails on a missing model file with llama-server's messages, rc 1.
- ``ghcr.io/syv-ai/hyperqwen:sandbox`` — upstream's entrypoint shape (``prepare``, ``single``,
  ``batch``) over the harness' stand-in engine (``stubs/openai_stub.py --kind vllm``) and
  prepare (``stubs/hyperqwen_prepare.py``), same minimal root. The stand-in engine's failure knobs
  (``answer500``, ``die_after``, ``boot_delay_s``: stubs/openai_stub.py) are files in
  ``/app/models/.sandbox-control/``, i.e. ``$MODELS_DIR/.sandbox-control/`` on the host
  (``hostctl.HQ_CONTROL``): the model server is where those failures come from.

usage: images.py build              print {repository: manifest digest} (no registry needed)
       images.py push REGISTRY_URL CA  push them; print {repository: digest}
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import ssl
import sys
import tarfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MTIME = 1767225600  # 2026-01-01T00:00:00Z, like the mirror's packages
DROP = ("usr/share/doc/", "usr/share/man/", "usr/share/locale/", "usr/share/lintian/", "usr/share/bug/")
LLAMA_REPO = "ghcr.io/ggml-org/llama.cpp"
HYPERQWEN_REPO = "ghcr.io/syv-ai/hyperqwen"
MT_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_CONFIG = "application/vnd.docker.container.image.v1+json"
MT_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"

LLAMA_SERVER = r'''#!/usr/bin/python3.11
"""llama-server's command line over llama.cpp's server in the xllamacpp wheel (rigkit sandbox image)."""
import os, signal, sys, threading
args = sys.argv[1:]
opts = {"model": "", "host": "127.0.0.1", "port": 8080, "alias": "", "ctx": 4096, "threads": 1}
i = 0
while i < len(args):
    a = args[i]; v = args[i + 1] if i + 1 < len(args) else ""
    if a in ("-m", "--model"): opts["model"] = v; i += 2; continue
    if a == "--host": opts["host"] = v; i += 2; continue
    if a == "--port": opts["port"] = int(v); i += 2; continue
    if a in ("-a", "--alias"): opts["alias"] = v; i += 2; continue
    if a in ("-c", "--ctx-size"): opts["ctx"] = int(v); i += 2; continue
    if a in ("-t", "--threads"): opts["threads"] = int(v); i += 2; continue
    i += 1
m = opts["model"]
if not m or not os.path.isfile(m):
    for line in (f"gguf_init_from_file: failed to open GGUF file '{m}'",
                 f"llama_model_load: error loading model: llama_model_loader: failed to load model from {m}",
                 f"common_init_from_params: failed to load model '{m}'", f"srv    load_model: failed to load model, '{m}'",
                 "main: exiting due to model loading error"):
        print(line, file=sys.stderr)
    sys.exit(1)
import xllamacpp as xlc
p = xlc.CommonParams()
p.model.path = m
p.n_ctx = opts["ctx"] or 4096
p.cpuparams.n_threads = opts["threads"]
p.cpuparams_batch.n_threads = opts["threads"]
p.hostnames = [opts["host"]] if isinstance(p.hostnames, list) else opts["host"]
p.port = opts["port"]
alias = opts["alias"] or os.path.basename(m)
p.model_alias = [alias] if isinstance(p.model_alias, (list, set)) else alias
srv = xlc.Server(p)
print(f"main: server is listening on http://{opts['host']}:{opts['port']}", flush=True)
ev = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: ev.set())
signal.signal(signal.SIGINT, lambda *_: ev.set())
ev.wait()
os._exit(0)
'''

HYPERQWEN_ENTRYPOINT = r'''#!/usr/bin/python3.11
"""HyperQwen's entrypoint shape (prepare | single | batch) over the sandbox's stand-in engine."""
import os, sys
cmd = (sys.argv[1:] or ["single"])[0]
prep = ["/usr/bin/python3.11", "/app/hyperqwen_prepare.py", "/app/models"]
if cmd == "prepare":
    os.execv(prep[0], prep)
if cmd not in ("single", "batch"):
    print(f"unknown command {cmd!r}: use prepare, single or batch", file=sys.stderr)
    sys.exit(2)
if os.environ.get("PREPARE", "1") != "0":  # like upstream: the idempotent prepare first
    pid = os.fork()
    if pid == 0:
        os.execv(prep[0], prep)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(os.waitstatus_to_exitcode(status))
port = os.environ.get("PORT", "18020")
serve = ["/usr/bin/python3.11", "/app/openai_stub.py", "--kind", "vllm", "--host", "0.0.0.0", "--port", port,
         "--alias", "qwen3.8-27b", "--api-key", os.environ.get("VLLM_API_KEY", ""), "--control-dir", "/app/models/.sandbox-control"]
os.execv(serve[0], serve)
'''


def _tar_layer(entries: list[tuple[str, str, object, int]]) -> tuple[bytes, str]:
    """(gzip'ed layer, diff_id) from (arcname, type 'f'|'d'|'l', content bytes | link target, mode)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, kind, content, mode in sorted(entries, key=lambda e: e[0]):
            ti = tarfile.TarInfo(name)
            ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname, ti.mode = MTIME, 0, 0, "root", "root", mode
            if kind == "d":
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            elif kind == "l":
                ti.type, ti.linkname = tarfile.SYMTYPE, content
                tf.addfile(ti)
            else:
                ti.size = len(content)
                tf.addfile(ti, io.BytesIO(content))
    data = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz, mtime=0, compresslevel=1) as g:
        g.write(data)
    return gz.getvalue(), "sha256:" + hashlib.sha256(data).hexdigest()


def _tree(src: Path, prefix: str = "") -> list[tuple[str, str, object, int]]:
    out = []
    for p in sorted(src.rglob("*")):
        rel = prefix + p.relative_to(src).as_posix()
        if any(rel.startswith(d) or (rel + "/").startswith(d) for d in DROP) or "__pycache__" in rel:
            continue
        st = p.lstat()
        if p.is_symlink():
            out.append((rel, "l", os.readlink(p), 0o777))
        elif p.is_dir():
            out.append((rel, "d", None, st.st_mode & 0o7777))
        else:
            out.append((rel, "f", p.read_bytes(), st.st_mode & 0o7777))
    return out


def base_entries() -> list[tuple[str, str, object, int]]:
    """The minimal root: the unpacked IMAGE_DEBS merged, plus /tmp, /etc/passwd and friends."""
    sys.path.insert(0, str(HERE))
    import debs

    d = debs.unpacked("image")
    merged: dict[str, tuple] = {}
    for pkg in sorted(debs.IMAGE_DEBS):
        for e in _tree(d / pkg):
            merged[e[0]] = e
    extra = [("tmp", "d", None, 0o1777), ("etc/passwd", "f", b"root:x:0:0:root:/root:/bin/false\n", 0o644),
             ("etc/group", "f", b"root:x:0:\n", 0o644), ("root", "d", None, 0o700), ("app", "d", None, 0o755),
             ("proc", "d", None, 0o555), ("sys", "d", None, 0o555), ("dev", "d", None, 0o755),
             ("run", "d", None, 0o755), ("etc", "d", None, 0o755)]
    for e in extra:
        merged[e[0]] = e
    return list(merged.values())


def xllamacpp_entries() -> list[tuple[str, str, object, int]]:
    found = sorted(ROOT.glob(".venv/lib/python3.11/site-packages/xllamacpp"))
    if not found:
        raise SystemExit("the llama.cpp image needs xllamacpp in the project's venv (make venv)")
    return _tree(found[0], "usr/local/lib/python3.11/dist-packages/xllamacpp/")


def image(layers: list[tuple[bytes, str]], entrypoint: list[str], cmd: list[str] | None, env: list[str],
          workdir: str = "/app") -> tuple[bytes, bytes, list[tuple[bytes, str]]]:
    """(manifest, config, layers) of one image."""
    config = {"architecture": "amd64", "os": "linux", "created": "2026-01-01T00:00:00Z",
              "config": {"Entrypoint": entrypoint, "Cmd": cmd, "Env": env, "WorkingDir": workdir},
              "rootfs": {"type": "layers", "diff_ids": [diff for _, diff in layers]},
              "history": [{"created": "2026-01-01T00:00:00Z", "created_by": "rigkit tests/harness/images.py"}
                          for _ in layers]}
    cfg = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {"schemaVersion": 2, "mediaType": MT_MANIFEST,
                "config": {"mediaType": MT_CONFIG, "size": len(cfg), "digest": "sha256:" + hashlib.sha256(cfg).hexdigest()},
                "layers": [{"mediaType": MT_LAYER, "size": len(gz), "digest": "sha256:" + hashlib.sha256(gz).hexdigest()}
                           for gz, _ in layers]}
    return json.dumps(manifest, sort_keys=True, indent=3).encode(), cfg, layers


ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"]


def build() -> dict[str, tuple[str, bytes, bytes, list]]:
    """{repository: (tag, manifest, config, layers)}."""
    base = _tar_layer(base_entries())
    llama_app = _tar_layer([("app/llama-server", "f", LLAMA_SERVER.encode(), 0o755)])
    xl = _tar_layer(xllamacpp_entries())
    hq_app = _tar_layer([("app/entrypoint.py", "f", HYPERQWEN_ENTRYPOINT.encode(), 0o755),
                         ("app/openai_stub.py", "f", (HERE / "stubs/openai_stub.py").read_bytes(), 0o644),
                         ("app/hyperqwen_prepare.py", "f", (HERE / "stubs/hyperqwen_prepare.py").read_bytes(), 0o644),
                         ("app/models", "d", None, 0o755), ("cache", "d", None, 0o755)])
    out = {}
    out[LLAMA_REPO] = ("server-cuda", *image([base, xl, llama_app], ["/app/llama-server"], None, ENV))
    out[HYPERQWEN_REPO] = ("sandbox", *image([base, hq_app], ["/app/entrypoint.py"], ["single"], ENV))
    return out


def digest(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def push(registry: str, ca: str | None, images: dict) -> dict[str, str]:
    """Push every image to ``registry`` (``https://host[:port]``); {repository: manifest digest}."""
    ctx = ssl.create_default_context(cafile=ca) if ca else None

    def req(method, url, data=None, headers=None):
        r = urllib.request.Request(url if url.startswith("http") else registry + url, data=data, method=method,
                                   headers=headers or {})
        try:
            return urllib.request.urlopen(r, context=ctx, timeout=120)
        except urllib.error.HTTPError as e:
            if method == "HEAD" and e.code == 404:
                return None
            raise RuntimeError(f"{method} {url}: HTTP {e.code}: {e.read()[:300]!r}") from None

    out = {}
    for repo, (tag, manifest, cfg, layers) in images.items():
        name = repo.split("/", 1)[1]  # the path inside the registry: ggml-org/llama.cpp
        for blob in [cfg, *(gz for gz, _ in layers)]:
            dg = digest(blob)
            if req("HEAD", f"/v2/{name}/blobs/{dg}") is not None:
                continue
            loc = req("POST", f"/v2/{name}/blobs/uploads/").headers["Location"]
            loc = loc if loc.startswith("http") else registry + loc
            sep = "&" if "?" in loc else "?"
            req("PUT", f"{loc}{sep}digest={dg}", data=blob, headers={"Content-Type": "application/octet-stream"})
        req("PUT", f"/v2/{name}/manifests/{tag}", data=manifest, headers={"Content-Type": MT_MANIFEST})
        out[repo] = digest(manifest)
    return out


def main(argv: list[str]) -> int:
    imgs = build()
    if argv and argv[0] == "push":
        print(json.dumps(push(argv[1], argv[2] if len(argv) > 2 else None, imgs), indent=1))
    else:
        print(json.dumps({r: digest(v[1]) for r, v in imgs.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
