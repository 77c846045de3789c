"""The GGUF header read from the front of a file (rigkit.spec.gguf_header) is what llama.cpp's own
reader reads, and what gguf-py summarizes:

- differential against llama.cpp's ``gguf_init_from_file`` (the xllamacpp wheel, tests/unit/gguf_real.py)
  over generated headers — valid ones of every value and array type and tensors of every ggml type,
  and one-field corruptions of each — 0 disagreements but the listed ones (:data:`LISTED`);
- its summary is gguf-py's summary of the whole file, for every header GGUFWriter writes;
- it fetches only the header's bytes, never more than the header's counts announce, and names each
  fault by its field at its offset.
"""

from __future__ import annotations

import math
import re
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")
pytest.importorskip("xllamacpp")

from rigkit.spec.gguf_header import (  # noqa: E402
    GGML_TYPES,
    GGUF_TYPES,
    MIN_KV_BYTES,
    HeaderError,
    parse,
    read_header,
)

from .gguf_py_oracle import gguf_py_summary  # noqa: E402
from .gguf_real import Oracle, library  # noqa: E402

#: Where rigkit and llama.cpp's gguf_init_from_file may disagree, each by design (module doc of
#: rigkit.spec.gguf_header): the words that mark rigkit's refusal → what llama.cpp may do there.
LISTED = {
    # the counts are checked against the file before what they announce is fetched: llama.cpp refuses
    # too, later, naming whatever it then reads past the real fields (or the end of the file)
    "tensor infos and": "refuses, naming another field",
    # llama_model_loader's check, not gguf_init_from_file's: a tensor's data past the end of the file
    "data is not within the file bounds": "reads the header",
    # a file that ends inside a tensor's type: gguf_init_from_reader checks info.t.type after the failed
    # read, an uninitialized value, and names whatever that holds
    "ggml type: 4 bytes at byte": "refuses, naming another field",
}


@pytest.fixture(scope="module")
def oracle():
    o = Oracle()
    yield o
    o.close()


# --- a GGUF writer that records where each field lies ----------------------------------------------

_FMT = {t: code for t, (_name, code) in GGUF_TYPES.items() if code}
_INT_RANGE = {0: (0, 255), 1: (-128, 127), 2: (0, 65535), 3: (-32768, 32767), 4: (0, 2**32 - 1),
              5: (-2**31, 2**31 - 1), 10: (0, 2**64 - 1), 11: (-2**63, 2**63 - 1)}


class Writer:
    """GGUF v2/v3 bytes (ggml ``docs/gguf.md``), each field's ``(offset, struct format, name)`` kept in ``fields``."""

    def __init__(self):
        self.out = bytearray()
        self.fields: list[tuple[int, str, str]] = []

    def put(self, fmt: str, value, name: str) -> None:
        self.fields.append((len(self.out), fmt, name))
        self.out += struct.pack("<" + fmt, value)

    def string(self, raw: bytes, name: str) -> None:
        self.put("Q", len(raw), f"{name} length")
        self.out += raw

    def value(self, vtype: int, v, name: str) -> None:
        if vtype == 8:
            self.string(v, name)
        else:
            self.out += struct.pack("<" + _FMT[vtype], v)


def values(vtype: int):
    if vtype in _INT_RANGE:
        return st.integers(*_INT_RANGE[vtype])
    if vtype == 6:
        return st.floats(width=32, allow_nan=False)
    if vtype == 12:
        return st.floats(allow_nan=False)
    if vtype == 7:
        return st.integers(0, 1)
    return st.binary(max_size=12).filter(lambda b: b"\0" not in b)  # 8: a string, as bytes (llama.cpp keeps bytes)


SCALAR_TYPES = [t for t in GGUF_TYPES if t != 9]
USABLE_GGML = [i for i, (_n, blck, _s) in enumerate(GGML_TYPES) if blck]


@st.composite
def gguf_files(draw):
    """A valid GGUF (header and zeroed tensor data): key/values of every type and array type,
    optionally ``general.alignment``, tensors of every usable ggml type with 0–4 dimensions (zeros
    among them), contiguous and padded as llama.cpp expects. Returns ``(bytes, fields)``."""
    version = draw(st.sampled_from([2, 3]))
    keys = draw(st.lists(st.binary(min_size=1, max_size=10).filter(lambda k: b"\0" not in k), max_size=6,
                         unique=True).filter(lambda ks: b"general.alignment" not in ks))
    kvs = []
    for key in keys:
        vtype = draw(st.sampled_from(SCALAR_TYPES + [9]))
        if vtype == 9:
            etype = draw(st.sampled_from(SCALAR_TYPES))
            kvs.append((key, 9, etype, draw(st.lists(values(etype), max_size=5))))
        else:
            kvs.append((key, vtype, None, draw(values(vtype))))
    alignment = draw(st.none() | st.sampled_from([1, 2, 8, 32, 64, 256]))
    if alignment is not None:
        kvs.insert(draw(st.integers(0, len(kvs))), (b"general.alignment", 4, None, alignment))
    names = draw(st.lists(st.binary(max_size=12).filter(lambda n: b"\0" not in n), max_size=4, unique=True))
    tensors = []
    for name in names:
        n_dims = draw(st.integers(0, 4))
        gtype = draw(st.sampled_from(USABLE_GGML if n_dims else [i for i in USABLE_GGML if GGML_TYPES[i][1] == 1]))
        ne = [GGML_TYPES[gtype][1] * draw(st.integers(0, 2))] + [draw(st.integers(0, 3)) for _ in range(3)]
        tensors.append((name, n_dims, ne[:n_dims], gtype))
    align = alignment or 32
    w = Writer()
    w.out += b"GGUF"
    w.fields.append((0, "4s", "magic"))
    w.put("I", version, "version")
    w.put("q", len(tensors), "n_tensors")
    w.put("q", len(kvs), "n_kv")
    for i, (key, vtype, etype, v) in enumerate(kvs):
        w.string(key, f"key {i}")
        w.put("i", vtype, f"key {i} type")
        if vtype == 9:
            w.put("i", etype, f"key {i} element type")
            w.put("Q", len(v), f"key {i} count")
            for j, x in enumerate(v):
                w.value(etype, x, f"key {i} [{j}]")
        elif key == b"general.alignment":
            w.put("I", v, "general.alignment value")
        else:
            w.value(vtype, v, f"key {i} value")
    offset = 0
    for i, (name, n_dims, ne, gtype) in enumerate(tensors):
        w.string(name, f"tensor {i} name")
        w.put("I", n_dims, f"tensor {i} n_dims")
        for j, d in enumerate(ne):
            w.put("q", d, f"tensor {i} ne[{j}]")
        w.put("i", gtype, f"tensor {i} type")
        w.put("Q", offset, f"tensor {i} offset")
        full = (ne + [1] * 4)[:4]
        _n, blck, size = GGML_TYPES[gtype]
        nbytes = 0 if 0 in full else full[0] // blck * size * full[1] * full[2] * full[3]
        offset += -(-nbytes // align) * align
    if tensors:
        w.out += bytes(-len(w.out) % align)
    w.out += bytes(offset)
    return bytes(w.out), w.fields


def _bad_values(fmt: str, old):
    bits = struct.calcsize(fmt) * 8
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if fmt.islower() else (0, (1 << bits) - 1)
    picks = {lo, hi, 0, 1, lo + (hi - lo) // 2 + 1, hi // 2, 9999, 13, 9, 5, 43, 4, 64, 65, 1 << 30, (1 << 30) + 1}
    picks |= {old + d for d in (-1, 1, 8, 16, -16, 1 << 20)}
    return sorted(v for v in picks if lo <= v <= hi and v != old)


@st.composite
def corrupted_files(draw):
    """A valid file (:func:`gguf_files`) with one field changed (a count, length, type, dimension,
    offset, the version or the magic, the alignment), one key or tensor name made a duplicate, or the
    file cut short. Returns ``(bytes, what was done)``."""
    data, fields = draw(gguf_files())
    data = bytearray(data)
    kind = draw(st.sampled_from(["field", "field", "field", "truncate", "duplicate"]))
    if kind == "truncate":
        cut = draw(st.integers(0, max(0, len(data) - 1)))
        return bytes(data[:cut]), f"cut at {cut}"
    if kind == "duplicate":
        names = [(off, name) for off, _f, name in fields if re.fullmatch(r"(key|tensor) \d+ (name )?length", name)]
        pairs = [(a, b) for a in names for b in names if a[0] < b[0] and a[1].split()[0] == b[1].split()[0]]
        if pairs:
            (a, _), (b, what) = draw(st.sampled_from(pairs))
            la, lb = (struct.unpack_from("<Q", data, x)[0] for x in (a, b))
            if la == lb:
                data[b + 8:b + 8 + lb] = data[a + 8:a + 8 + la]
                return bytes(data), f"{what}: a duplicate"
    off, fmt, name = draw(st.sampled_from(fields))
    if fmt == "4s":
        data[0:4] = draw(st.sampled_from([b"GGUG", b"FUGG", b"\x80GG\x01", b"gguf"]))
        return bytes(data), "magic"
    (old,) = struct.unpack_from("<" + fmt, data, off)
    new = draw(st.sampled_from(_bad_values(fmt, old)))
    struct.pack_into("<" + fmt, data, off, new)
    return bytes(data), f"{name}: {old} -> {new}"


def rigkit_reads(data: bytes, first: int = 1 << 16):
    try:
        h = parse(lambda a, b: data[a:b + 1], len(data), first=first)
    except HeaderError as exc:
        return None, exc
    return h, None


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def agree(tmp_path, oracle, data: bytes) -> str | None:
    """None when rigkit reads ``data`` as llama.cpp does (or differs only as :data:`LISTED`), else why not."""
    path = tmp_path / "h.gguf"
    path.write_bytes(data)
    real = oracle.read(str(path))
    h, err = rigkit_reads(data)
    if err is not None:
        listed = [k for k in LISTED if k in str(err)]
        if listed:
            return None if (not real["ok"] or LISTED[listed[0]] == "reads the header") else f"listed {err}"
        if real["ok"]:
            return f"rigkit refuses ({err}), llama.cpp reads it"
        said = real["log"][0].split(": ", 1)[1] if real["log"] else f"(crashed: {real.get('crash')})"
        printed = str(err).encode("utf-8", "surrogateescape").decode("utf-8", "replace")  # as ggml's log prints
        return None if said in printed else f"rigkit says {err!s}; llama.cpp says {said}"
    if not real["ok"]:
        return f"rigkit reads it, llama.cpp refuses: {real['log']}"
    def c_str(v):  # what gguf_get_key / gguf_get_val_str / gguf_get_arr_str give: a C string
        return [c_str(x) for x in v] if isinstance(v, list) else v.split("\0")[0] if isinstance(v, str) else v

    ours = {"version": h.version, "alignment": h.alignment, "data_offset": h.data_offset,
            "kv": [[c_str(k), [9, h.type_of(k)[1]] if h.type_of(k)[0] == 9 else h.type_of(k)[0], c_str(h.value(k))]
                   for k in h.keys],
            "tensors": [[t.name, list(t.shape), t.type, t.offset, t.nbytes] for t in h.tensors]}
    for key in ours:
        if not _same(ours[key], real[key]):
            return f"{key}: rigkit {ours[key]!r}, llama.cpp {real[key]!r}"
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=gguf_files())
def test_every_valid_header_is_read_as_llama_cpp_reads_it(tmp_path, oracle, data):
    raw, _ = data
    assert agree(tmp_path, oracle, raw) is None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=corrupted_files())
def test_every_one_field_corruption_is_judged_as_llama_cpp_judges_it(tmp_path, oracle, case):
    raw, what = case
    assert agree(tmp_path, oracle, raw) is None, what


def test_the_ggml_type_table_is_the_wheels():
    lib = library()
    for i, (name, blck, size) in enumerate(GGML_TYPES):
        assert (lib.ggml_type_name(i).decode(), lib.ggml_blck_size(i), lib.ggml_type_size(i)) == (name, blck, size), i
    # one past the table: llama.cpp's own bound (its message names GGML_TYPE_COUNT)
    info = struct.pack("<Q", 1) + b"t" + struct.pack("<Iqi", 1, 32, len(GGML_TYPES))
    _h, err = rigkit_reads(b"GGUF" + struct.pack("<Iqq", 3, 1, 0) + info + bytes(40))
    assert f"should be in [0, {len(GGML_TYPES)})" in str(err)


# --- the summary: gguf-py's, for what GGUFWriter writes ---------------------------------------------

TYPES = [np.float32, np.float16]


@st.composite
def headers(draw):
    """Parameters of a llama-shaped GGUF: layers, heads, dims, a vocabulary (its token list makes
    the header long), optional keys (per-layer KV heads, key/value lengths, sliding window)."""
    n_layer = draw(st.integers(1, 4))
    n_head = draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([4, 8]))
    per_layer_kv = draw(st.booleans())
    kv = ([draw(st.sampled_from([1, n_head])) for _ in range(n_layer)] if per_layer_kv
          else draw(st.sampled_from([1, n_head])))
    return {
        "arch": draw(st.sampled_from(["llama", "qwen3", "gemma3"])),
        "n_layer": n_layer, "n_head": n_head, "head_dim": head_dim, "kv": kv,
        "n_ctx": draw(st.integers(256, 1 << 20)),
        "vocab": draw(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3000, unique=True)),
        "key_length": draw(st.none() | st.just(head_dim * 2)),
        "window": draw(st.none() | st.integers(64, 8192)),
        "dtype": draw(st.sampled_from(TYPES)),
        "alignment": draw(st.sampled_from([None, 32, 64, 256])),
    }


def write_gguf(path, p) -> int:
    """Write a complete GGUF (small real tensors) for parameters ``p``; return its size in bytes."""
    arch, d = p["arch"], p["n_head"] * p["head_dim"]
    w = gguf.GGUFWriter(str(path), arch)
    if p["alignment"]:
        w.add_custom_alignment(p["alignment"])
    w.add_context_length(p["n_ctx"])
    w.add_embedding_length(d)
    w.add_block_count(p["n_layer"])
    w.add_feed_forward_length(2 * d)
    w.add_head_count(p["n_head"])
    w.add_head_count_kv(p["kv"])
    if p["key_length"]:
        w.add_key_length(p["key_length"])
        w.add_value_length(p["key_length"])
    if p["window"]:
        w.add_sliding_window(p["window"])
    w.add_token_list(p["vocab"])
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((len(p["vocab"]), d)).astype(p["dtype"]))
    for il in range(p["n_layer"]):
        w.add_tensor(f"blk.{il}.attn_q.weight", rng.standard_normal((d, d)).astype(p["dtype"]))
        w.add_tensor(f"blk.{il}.attn_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.stat().st_size


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(p=headers(), first=st.integers(1, 1 << 16))
def test_a_header_read_from_the_front_is_what_gguf_py_reads_from_the_whole_file(tmp_path_factory, p, first):
    path = tmp_path_factory.mktemp("gguf") / "m.gguf"
    size = write_gguf(path, p)
    data = path.read_bytes()
    asked: list[tuple[int, int]] = []

    def fetch(start, end):
        asked.append((start, end))
        return data[start:end + 1]

    summary, fetched = read_header(fetch, size, first=first)
    whole = gguf.GGUFReader(str(path))
    assert summary == gguf_py_summary(whole)
    # the ranges are contiguous, never overlap, and stop at the header's end (or the first range)
    assert [a for a, _ in asked] == [0] + [b + 1 for _, b in asked[:-1]]
    assert fetched == asked[-1][1] + 1
    assert fetched <= max(2 * whole.data_offset, min(first, size))
    # what the estimate reads, from the whole file's own reader
    assert summary["block_count"] == p["n_layer"] and summary["context_length"] == p["n_ctx"]
    assert summary["head_count_kv"] == (p["kv"] if isinstance(p["kv"], int) or len(set(p["kv"])) > 1 else p["kv"][0])
    assert summary["key_length"] == (p["key_length"] or p["head_dim"])
    assert summary.get("sliding_window") == p["window"]
    assert summary["vocab_size"] == len(p["vocab"])
    tb = summary["tensor_bytes"]
    assert sum(tb["layers"]) + tb["input"] + tb["output"] == sum(int(t.n_bytes) for t in whole.tensors)
    assert tb["tied_output"] is True  # no output.weight: llama.cpp reuses token_embd


# --- bytes fetched, and each fault named where it is ------------------------------------------------

def vocab_header(n_tokens: int = 20_000, n_layer: int = 4) -> tuple[bytes, list[tuple[int, str, str]]]:
    """A llama header with an ``n_tokens`` vocabulary (tokens, scores, types, merges) and 4 tensor
    infos a layer, its tensor data left out (the file is taken as 16.5 GB: see :func:`big_fetch`)."""
    w = Writer()
    w.out += b"GGUF"
    w.fields.append((0, "4s", "magic"))
    w.put("I", 3, "version")
    names = [f"blk.{il}.{n}.weight".encode() for il in range(n_layer) for n in ("attn_q", "attn_k", "attn_v", "ffn_up")]
    w.put("q", len(names), "n_tensors")
    kvs = [(b"general.architecture", 8, b"llama"), (b"llama.block_count", 4, n_layer),
           (b"llama.embedding_length", 4, 4096), (b"llama.attention.head_count", 4, 32),
           (b"llama.context_length", 4, 8192)]
    arrays = [(b"tokenizer.ggml.tokens", 8, [f"tok{i}".encode() for i in range(n_tokens)]),
              (b"tokenizer.ggml.scores", 6, [0.0] * n_tokens), (b"tokenizer.ggml.token_type", 5, [1] * n_tokens),
              (b"tokenizer.ggml.merges", 8, [f"t{i} o{i}".encode() for i in range(n_tokens - 1)])]
    w.put("q", len(kvs) + len(arrays), "n_kv")
    for i, (key, vtype, v) in enumerate(kvs):
        w.string(key, f"key {i}")
        w.put("i", vtype, f"key {i} type")
        w.value(vtype, v, f"key {i} value")
    for i, (key, etype, v) in enumerate(arrays, start=len(kvs)):
        w.string(key, f"key {i}")
        w.put("i", 9, f"key {i} type")
        w.put("i", etype, f"key {i} element type")
        w.put("Q", len(v), f"key {i} count")
        for j, x in enumerate(v):
            w.value(etype, x, f"key {i} [{j}]")
    q4k, size = 12, 4096 * 4096 // 256 * 144
    for i, name in enumerate(names):
        w.string(name, f"tensor {i} name")
        w.put("I", 2, f"tensor {i} n_dims")
        w.put("q", 4096, f"tensor {i} ne[0]")
        w.put("q", 4096, f"tensor {i} ne[1]")
        w.put("i", q4k, f"tensor {i} type")
        w.put("Q", i * size, f"tensor {i} offset")
    return bytes(w.out), w.fields


BIG = 16_500_000_000


def big_fetch(data: bytes, asked: list):
    """``fetch`` of a 16.5 GB file whose front is ``data`` (the rest reads as zeros)."""
    def fetch(a, b):
        asked.append((a, b))
        return data[a:b + 1].ljust(b + 1 - a, b"\0")
    return fetch


@pytest.mark.parametrize("first", [24, 4096, 1 << 16])
def test_a_big_vocabulary_is_fetched_in_a_few_ranges_within_twice_its_end(first):
    data, fields = vocab_header()
    asked: list = []
    h = parse(big_fetch(data, asked), BIG, first=first)
    assert h.data_offset == len(data) + (-len(data) % 32)
    assert len(data) <= h.fetched == asked[-1][1] + 1 <= 2 * len(data)
    assert h.requests == len(asked) <= (len(data) // first).bit_length() + 6  # the doubling, and a few more
    assert h.count("tokenizer.ggml.tokens") == 20_000 and h.value("llama.block_count") == 4


# One-field corruptions of the kinds issue 62 found unnamed, each: (field to change, new value,
# the field rigkit names, llama.cpp's words). The bytes fetched stay within what the header announces.
KINDS = [
    ("n_tensors", (1 << 63) - 1, "n_tensors", "number of tensors is 9223372036854775807 but must be in"),
    ("n_kv", 1 << 62, "n_kv", "number of key value pairs is 4611686018427387904 but must be in"),
    ("n_kv", 1 << 40, "n_tensors, n_kv", "tensor infos and 1099511627776 key/value pairs take at least"),
    ("key 5 count", 1 << 63, "key 5 'tokenizer.ggml.tokens'", "an array of 9223372036854775808 str"),
    ("key 6 element type", 9999, "key 6 'tokenizer.ggml.scores'", "has invalid GGUF type 9999"),
    ("key 3 length", 1 << 40, "key 3", "string length 1099511627776 exceeds maximum 1073741824"),
    ("key 0 length", (1 << 30) - 1, "key 0", "ends past byte"),
    ("tensor 2 n_dims", 5, "tensor 2 'blk.0.attn_v.weight' n_dims", "has invalid number of dimensions: 5 > 4"),
    ("tensor 3 type", 9999, "tensor 3 'blk.0.ffn_up.weight' type", "has invalid ggml type 9999. should be in [0, 43)"),
    ("tensor 1 type", 4, "tensor 1 'blk.0.attn_k.weight' type", "of type 4 (DEPRECATED) has 4096 elements per row"),
    ("tensor 0 ne[1]", -1, "tensor 0 'blk.0.attn_q.weight' ne[1]", "dimension 1 has invalid number of elements: -1 < 0"),
    ("tensor 5 offset", 5 * 4096 * 4096 // 256 * 144 + 16, "tensor 5 'blk.1.attn_k.weight' offset", "has offset"),
    ("version", 4, "version", "this GGUF file is version 4 but this software only supports up to version 3"),
]


@pytest.mark.parametrize(("field", "value", "named", "words"), KINDS, ids=[f"{k[0]}={k[1]}" for k in KINDS])
def test_each_corruption_is_named_by_field_at_its_offset_within_what_the_counts_announce(field, value, named, words):
    data, fields = vocab_header(n_tokens=2000)
    where = {name: (off, fmt) for off, fmt, name in fields}
    off, fmt = where[field]
    bad = bytearray(data)
    struct.pack_into("<" + fmt, bad, off, value if fmt.isupper() or value < 1 << 63 else value - (1 << 64))
    asked: list = []
    with pytest.raises(HeaderError) as err:
        parse(big_fetch(bytes(bad), asked), BIG, first=4096)
    e = err.value
    assert e.field == named and words in str(e), str(e)
    assert str(e).startswith(f"at byte {e.offset}, {named}: ")
    if field != "tensor 5 offset" and named != "n_tensors, n_kv":  # offsets: judged once all infos are read
        assert e.offset == off
    assert e.fetched == sum(b - a + 1 for a, b in asked)
    assert e.fetched <= max(4096, 2 * len(data))  # never the file, never MAX_HEADER: within twice the real header


def test_the_counts_bound_what_is_fetched_before_it_is_fetched():
    """A string length within llama.cpp's limits but past MAX_HEADER is refused unfetched; so are
    counts whose least bytes pass the file."""
    data, fields = vocab_header(n_tokens=100)
    asked: list = []
    bad = bytearray(data)
    off = {name: o for o, _f, name in fields}["n_kv"]
    struct.pack_into("<q", bad, off, (len(data)) // MIN_KV_BYTES + 1)
    with pytest.raises(HeaderError, match="take at least"):
        parse(big_fetch(bytes(bad), asked), len(data), first=24)
    assert asked == [(0, 23)]


def test_a_vocab_only_file_ends_right_after_its_key_values(tmp_path, oracle):
    """llama.cpp's own vocab-only files (``models/ggml-vocab-*.gguf``): no tensors, no padding."""
    w = Writer()
    w.out += b"GGUF" + struct.pack("<Iqq", 3, 0, 1)
    w.string(b"general.architecture", "key")
    w.put("i", 8, "type")
    w.string(b"llama", "value")
    h, err = rigkit_reads(bytes(w.out))
    assert err is None and h.data_offset == len(w.out)
    assert agree(tmp_path, oracle, bytes(w.out)) is None


def test_not_a_gguf_is_refused_by_its_magic():
    with pytest.raises(HeaderError, match=r"at byte 0, magic: not a GGUF file: invalid magic characters: 'PK\?\?'"):
        read_header(lambda a, b: (b"PK\x03\x04" + bytes(4096))[a:b + 1], 4100)
