"""The GGUF header read from the front of a file (rigkit.spec.gguf_header) agrees with gguf-py's
reader on the whole file, for every header hypothesis generates with gguf-py's own GGUFWriter,
and never reads much more than the header."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")

from rigkit.spec.gguf_header import HeaderError, header_end, read_header, summarize  # noqa: E402

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
def test_a_header_read_from_the_front_is_what_gguf_reads_from_the_whole_file(tmp_path_factory, p, first):
    path = tmp_path_factory.mktemp("gguf") / "m.gguf"
    size = write_gguf(path, p)
    data = path.read_bytes()
    asked: list[tuple[int, int]] = []

    def fetch(start, end):
        asked.append((start, end))
        return data[start:end + 1]

    summary, fetched = read_header(fetch, size, first=first)
    whole = gguf.GGUFReader(str(path))
    assert summary == summarize(whole)
    # the ranges are contiguous, never overlap, and stop within twice the header (or the first range)
    assert [a for a, _ in asked] == [0] + [b + 1 for _, b in asked[:-1]]
    assert fetched == asked[-1][1] + 1
    assert whole.data_offset <= fetched <= max(2 * whole.data_offset, min(first, size))
    # what the estimate reads, from the whole file's own reader
    assert summary["block_count"] == p["n_layer"] and summary["context_length"] == p["n_ctx"]
    assert summary["head_count_kv"] == (p["kv"] if isinstance(p["kv"], int) or len(set(p["kv"])) > 1 else p["kv"][0])
    assert summary["key_length"] == (p["key_length"] or p["head_dim"])
    assert summary.get("sliding_window") == p["window"]
    assert summary["vocab_size"] == len(p["vocab"])
    tb = summary["tensor_bytes"]
    assert sum(tb["layers"]) + tb["input"] + tb["output"] == sum(int(t.n_bytes) for t in whole.tensors)
    assert tb["tied_output"] is True  # no output.weight: llama.cpp reuses token_embd
    # the length walk finds the header's end exactly, and no end in a shorter prefix
    assert header_end(data) == whole.data_offset
    assert header_end(data[:whole.data_offset - 1]) is None


def test_gguf_reader_cannot_read_a_prefix_alone(tmp_path):
    """Why the sparse file: GGUFReader memmaps a path and slices every tensor out of it."""
    p = {"arch": "llama", "n_layer": 2, "n_head": 2, "head_dim": 8, "kv": 2, "n_ctx": 4096, "vocab": ["a", "b"],
         "key_length": None, "window": None, "dtype": np.float32, "alignment": None}
    path = tmp_path / "m.gguf"
    write_gguf(path, p)
    header_end = gguf.GGUFReader(str(path)).data_offset
    prefix = tmp_path / "prefix.gguf"
    prefix.write_bytes(path.read_bytes()[:header_end])
    with pytest.raises(ValueError):
        gguf.GGUFReader(str(prefix))


def test_not_a_gguf_is_refused_by_its_magic():
    with pytest.raises(HeaderError, match=r"not a GGUF file \(magic b'PK\\x03\\x04', expected b'GGUF'\)"):
        read_header(lambda a, b: (b"PK\x03\x04" + bytes(4096))[a:b + 1], 4100)
