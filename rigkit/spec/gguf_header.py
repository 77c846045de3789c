"""A GGUF file's header — its metadata and tensor infos — read from the front of the file only.

What the VRAM estimate (:mod:`rigkit.spec.vram`) needs of a llama.cpp model is in the header of its
GGUF file (format: ggml's ``docs/gguf.md``, "GGUF v3"; reader: ``ggml/src/gguf.cpp``): the magic and
version, the key/value metadata (``<arch>.block_count``, ``<arch>.attention.head_count_kv``, …) and
one info per tensor (name, shape, ggml type, offset), then padding to ``general.alignment`` (32
unless set) and the tensor data. The header is a few MiB of a file of many GiB, so ``rigkit models
lock`` fetches it by HTTP range requests (:func:`read_header`), growing the range until it parses.

It is parsed by the ``gguf`` package (llama.cpp's gguf-py, pinned in pyproject.toml), not by our own
code. Its :class:`gguf.GGUFReader` cannot read a stream: it takes a *path* and ``np.memmap``-s the
whole file, and its ``_build_tensors`` slices every tensor's data out of that map, so a file holding
only the first bytes fails there (a reshape of a short slice). It does read a *sparse* file of the
file's full size whose first bytes are the ones fetched: the tensor data are views that are never
touched, and nothing is read past ``data_offset``. A prefix is complete when the reader's
``data_offset`` (the end of the header, padding included) lies inside it — every byte the reader
parsed was a fetched one. Whether a prefix can be complete is first asked of :func:`header_end`,
which walks only the lengths: the reader's own parse of a large vocabulary takes seconds, and a
parse over the hole's zeros costs as much as a real one.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Callable
from typing import Any

#: First range fetched (bytes); doubled until the header parses, so at most about twice the
#: header is read. A tokenizer's vocabulary makes most headers 2–10 MiB (a 248k-token vocabulary
#: with merges ≈ 8 MiB): about eight requests.
FIRST_RANGE = 64 << 10
#: The most a header may take before we give up: a header this large is not a model's.
MAX_HEADER = 256 << 20


class HeaderError(ValueError):
    """Not a GGUF file this reader can use (bad magic, an unsupported version, a header past
    :data:`MAX_HEADER`, a model without the keys the estimate needs); the message says which."""


#: Bytes of each fixed-size GGUF value type (ggml's ``gguf.cpp`` ``GGUF_TYPE_SIZE``); 8 string, 9 array.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def header_end(prefix: bytes) -> int | None:
    """Where a GGUF file's tensor data start (``data_offset``: the header's end, padded to
    ``general.alignment``), if ``prefix`` holds the whole header; ``None`` when it stops before.

    Only walks the lengths (GGUF v3, ``docs/gguf.md``: little-endian; a string is a u64 length and
    its bytes; an array a u32 type, a u64 count and the elements; a tensor info a name, a u32
    ``n_dims``, ``n_dims`` u64 dimensions, a u32 type and a u64 offset), so growing ranges cost one
    :class:`gguf.GGUFReader` parse, not one per range: that reader decodes every token of a
    248k-token vocabulary (~8 s), complete or not. The values are read by :func:`summarize`."""
    u32, u64 = struct.Struct("<I"), struct.Struct("<Q")
    n = len(prefix)

    def need(pos: int) -> int:
        if pos > n:
            raise IndexError
        return pos

    def skip_value(pos: int, vtype: int) -> int:
        if vtype in _FIXED:
            return need(pos + _FIXED[vtype])
        if vtype == 8:
            (length,) = u64.unpack_from(prefix, need(pos + 8) - 8)
            return need(pos + 8 + length)
        if vtype == 9:
            (etype,) = u32.unpack_from(prefix, need(pos + 4) - 4)
            (count,) = u64.unpack_from(prefix, need(pos + 12) - 8)
            pos += 12
            if etype in _FIXED:
                return need(pos + count * _FIXED[etype])
            for _ in range(count):
                pos = skip_value(pos, etype)
            return pos
        raise HeaderError(f"unknown GGUF value type {vtype}")

    try:
        if n < 24:
            return None
        (n_tensors,) = u64.unpack_from(prefix, 8)
        (n_kv,) = u64.unpack_from(prefix, 16)
        pos, alignment = 24, 32
        for _ in range(n_kv):
            (klen,) = u64.unpack_from(prefix, need(pos + 8) - 8)
            key = prefix[pos + 8:need(pos + 8 + klen)]
            pos += 8 + klen
            (vtype,) = u32.unpack_from(prefix, need(pos + 4) - 4)
            if key == b"general.alignment" and vtype == 4:
                (alignment,) = u32.unpack_from(prefix, need(pos + 8) - 4)
            pos = skip_value(pos + 4, vtype)
        for _ in range(n_tensors):
            pos = skip_value(pos, 8)
            (n_dims,) = u32.unpack_from(prefix, need(pos + 4) - 4)
            pos = need(pos + 4 + 8 * n_dims + 4 + 8)
    except (IndexError, struct.error):
        return None
    end = pos + (-pos % alignment if alignment else 0)
    return end if end <= n else None


def _parse_prefix(prefix: bytes, size: int) -> Any | None:
    """A :class:`gguf.GGUFReader` over ``prefix`` placed at the start of a sparse file of ``size``
    bytes, or ``None`` when the header runs past the prefix (fetch more)."""
    from gguf import GGUFReader

    if len(prefix) < 24:  # magic, version, tensor and key/value counts
        if prefix[:4] != b"GGUF"[:len(prefix[:4])]:
            raise HeaderError(f"not a GGUF file (magic {prefix[:4]!r}, expected b'GGUF')")
        return None
    with tempfile.TemporaryDirectory(prefix="rigkit-gguf-") as tmp:
        path = os.path.join(tmp, "header.gguf")
        with open(path, "wb") as fh:
            fh.write(prefix)
            fh.truncate(max(size, len(prefix)))  # a hole: no disk, reads as zeros
        if prefix[:4] != b"GGUF":
            raise HeaderError(f"not a GGUF file (magic {prefix[:4]!r}, expected b'GGUF')")
        try:
            reader = GGUFReader(path)
        except ValueError as exc:
            if "version" in str(exc) or "alignment" in str(exc):
                raise HeaderError(str(exc)) from None
            return None  # parsed into the hole
        except Exception:  # noqa: BLE001 - whatever the reader makes of the hole's zeros
            return None
        if reader.data_offset > len(prefix):
            return None
        return summarize(reader)


def read_header(fetch: Callable[[int, int], bytes], size: int, first: int = FIRST_RANGE) -> tuple[dict[str, Any], int]:
    """Read a GGUF header through ``fetch(start, end)`` (bytes ``start``..``end`` inclusive, as an
    HTTP ``Range: bytes=start-end``) of a file of ``size`` bytes. Fetches ``[0, first)``, then
    doubles the range (fetching only the new bytes) until the header parses inside it.

    Returns ``(summary, bytes fetched)`` (:func:`summarize`). Raises :class:`HeaderError`."""
    have = b""
    want = min(first, size)
    while True:
        if want > len(have):
            chunk = fetch(len(have), want - 1)
            if len(chunk) != want - len(have):
                raise HeaderError(f"asked for bytes {len(have)}-{want - 1}, got {len(chunk)} bytes")
            have += chunk
        if len(have) >= 4 and have[:4] != b"GGUF":
            raise HeaderError(f"not a GGUF file (magic {have[:4]!r}, expected b'GGUF')")
        summary = _parse_prefix(have, size) if header_end(have) is not None else None
        if summary is not None:
            return summary, len(have)
        if len(have) >= size:
            raise HeaderError("the header does not parse even from the whole file")
        if len(have) >= MAX_HEADER:
            raise HeaderError(f"no complete header in the first {MAX_HEADER} bytes")
        want = min(len(have) * 2, size)


def _value(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.contents()
    if isinstance(value, list):
        return [v.item() if hasattr(v, "item") else v for v in value]
    return value.item() if hasattr(value, "item") else value


def _int_or_list(value: Any) -> int | list[int] | None:
    if value is None:
        return None
    if isinstance(value, list):
        ints = [int(v) for v in value]
        return ints[0] if ints and all(v == ints[0] for v in ints) else ints
    return int(value)


def summarize(reader: Any) -> dict[str, Any]:
    """What the estimate needs of a parsed header (``reader``: a :class:`gguf.GGUFReader`), a plain dict:

    - ``architecture`` (``general.architecture``), ``block_count``, ``context_length`` (tokens
      trained), ``embedding_length``, ``feed_forward_length`` (int, or one per layer), ``vocab_size`` (``<arch>.vocab_size``, else the token list's length);
    - ``head_count``, ``head_count_kv``: an int, or one per layer where the file lists them
      (llama.cpp reads ``<arch>.attention.head_count_kv`` as either; a 0 marks a layer without attention);
    - ``key_length``, ``value_length``: the head dimensions (``<arch>.attention.key_length`` /
      ``value_length``; llama.cpp's default ``embedding_length / head_count`` when absent);
    - ``sliding_window`` (tokens) and ``sliding_window_pattern`` (as the file gives it) when present;
    - ``full_attention_interval`` and ``ssm`` (``conv_kernel``, ``inner_size``, ``state_size``,
      ``group_count``, ``time_step_rank``) for hybrid models with recurrent layers, when present;
    - ``tensor_bytes``: ``{"layers": [bytes of blk.<i>.* for each block], "input": bytes of
      token_embd.*, "output": bytes of the rest (output, output_norm), "tied_output": no
      output.weight (llama.cpp then uses token_embd as the output, a second copy on the card)}``; ``tensor_types``: ``{ggml type name: bytes}``;
      ``header_bytes``: where the tensor data start (``data_offset``).

    Raises :class:`HeaderError` when a key the estimate cannot do without is missing."""
    from gguf import GGMLQuantizationType

    arch = _value(reader, "general.architecture")
    if not isinstance(arch, str):
        raise HeaderError("general.architecture missing")

    def k(name: str) -> Any:
        return _value(reader, f"{arch}.{name}")

    need = {"block_count": k("block_count"), "embedding_length": k("embedding_length"),
            "attention.head_count": k("attention.head_count")}
    missing = [f"{arch}.{name}" for name, v in need.items() if v is None]
    if missing:
        raise HeaderError(f"{', '.join(missing)} missing: cannot size its KV cache")
    n_layer = int(need["block_count"])
    head_count = _int_or_list(need["attention.head_count"])
    head_count_kv = _int_or_list(k("attention.head_count_kv"))
    n_embd = int(need["embedding_length"])
    first_heads = head_count if isinstance(head_count, int) else max(head_count)
    default_head = n_embd // first_heads if first_heads else 0
    vocab = k("vocab_size")
    if vocab is None:
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        vocab = len(tokens.data) if tokens is not None else 0
    layers = [0] * n_layer
    inputs = output = 0
    tied = not any(t.name == "output.weight" for t in reader.tensors)
    types: dict[str, int] = {}
    for t in reader.tensors:
        n = int(t.n_bytes)
        parts = t.name.split(".")
        if parts[0] == "blk" and len(parts) > 1 and parts[1].isdigit() and int(parts[1]) < n_layer:
            layers[int(parts[1])] += n
        elif parts[0] == "token_embd":
            inputs += n
        else:
            output += n
        name = GGMLQuantizationType(int(t.tensor_type)).name
        types[name] = types.get(name, 0) + n
    out: dict[str, Any] = {
        "architecture": arch,
        "block_count": n_layer,
        "context_length": int(k("context_length") or 0),
        "embedding_length": n_embd,
        "feed_forward_length": _int_or_list(k("feed_forward_length")) or 0,
        "vocab_size": int(vocab),
        "head_count": head_count,
        "head_count_kv": head_count if head_count_kv is None else head_count_kv,
        "key_length": int(k("attention.key_length") or default_head),
        "value_length": int(k("attention.value_length") or default_head),
        "tensor_bytes": {"layers": layers, "input": inputs, "output": output, "tied_output": tied},
        "tensor_types": dict(sorted(types.items())),
        "header_bytes": int(reader.data_offset),
    }
    if (window := k("attention.sliding_window")) is not None:
        out["sliding_window"] = int(window)
    if (pattern := k("attention.sliding_window_pattern")) is not None:
        out["sliding_window_pattern"] = [bool(v) for v in pattern] if isinstance(pattern, list) else int(pattern)
    if (interval := k("full_attention_interval")) is not None:
        out["full_attention_interval"] = int(interval)
    ssm = {name: int(v) for name in ("conv_kernel", "inner_size", "state_size", "group_count", "time_step_rank")
           if (v := k(f"ssm.{name}")) is not None}
    if ssm:
        out["ssm"] = ssm
    return out


def read_hub_header(url: str, size: int, headers: dict[str, str], session: Any = None,
                    first: int = FIRST_RANGE) -> tuple[dict[str, Any], int]:
    """:func:`read_header` of a file on the hub (``url``: its ``resolve`` URL at the locked commit),
    each range a ``GET`` with ``Range: bytes=a-b`` (redirects followed: the hub answers an LFS file
    with a 302 to its CDN; the client drops ``Authorization`` on the way to another origin). A
    server that ignores ``Range`` (200 instead of 206) is read only as far as asked, then closed.
    Raises :class:`HeaderError` or the HTTP client's error."""
    from huggingface_hub.utils import get_session

    http = session or get_session()

    def fetch(start: int, end: int) -> bytes:
        with http.stream("GET", url, headers={**headers, "Range": f"bytes={start}-{end}"},
                         follow_redirects=True) as resp:
            resp.raise_for_status()
            skip = start if resp.status_code == 200 else 0
            want = end - start + 1
            buf = bytearray()
            for chunk in resp.iter_bytes():
                buf += chunk
                if len(buf) >= skip + want:
                    break
            return bytes(buf[skip:skip + want])

    return read_header(fetch, size, first)
