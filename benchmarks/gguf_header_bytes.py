"""Bytes ``rigkit models lock`` reads of a GGUF file of the rig's scale (issue 46).

A header shaped like a 27B Qwen GGUF's — 248,320 tokens with their types and 247,587 merges (the
Qwen3.5 tokenizer's vocabulary size; merges one fewer than tokens, their number here a stand-in),
64 blocks of 13 tensor infos — is written with gguf-py's GGUFWriter (tensor infos only, no data)
and read back by :func:`rigkit.spec.gguf_header.read_header` as from a 16.5 GB file: the bytes and
requests it takes, against the file's size.

Run: ``.venv/bin/python benchmarks/gguf_header_bytes.py``
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import gguf

    from rigkit.spec.gguf_header import read_header

    vocab = 248_320
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "header.gguf"
        w = gguf.GGUFWriter(str(path), "qwen3")
        w.add_block_count(64)
        w.add_context_length(262_144)
        w.add_embedding_length(5120)
        w.add_head_count(24)
        w.add_head_count_kv(4)
        w.add_key_length(256)
        w.add_value_length(256)
        w.add_token_list([f"tok{i:06d}" for i in range(vocab)])
        w.add_token_types([1] * vocab)
        w.add_token_merges([f"t{i} o{i}" for i in range(vocab - 1 - 732)])
        q4k = gguf.GGMLQuantizationType.Q4_K
        names = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "attn_norm",
                 "ffn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm", "attn_gate"]
        for il in range(64):
            for n in names:
                w.add_tensor_info(f"blk.{il}.{n}.weight", [5120, 5120 * 144 // 256], np.dtype(np.uint8),
                                  5120 * 5120 * 144 // 256, q4k)  # byte shape: 20 Q4_K blocks of 144 B a row
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        w.close()
        data = path.read_bytes()
    file_size = 16_500_000_000
    requests = []
    t0 = time.perf_counter()
    def fetch(a: int, b: int) -> bytes:  # the file: the header, then (unread) tensor data
        requests.append((a, b))
        return data[a:b + 1].ljust(b + 1 - a, b"\0")

    summary, fetched = read_header(fetch, file_size)
    dt = time.perf_counter() - t0
    print(f"header {summary['header_bytes']:,} B; fetched {fetched:,} B in {len(requests)} range requests "
          f"({fetched / file_size:.4%} of a {file_size:,} B file); parsed in {dt:.2f} s")


if __name__ == "__main__":
    main()
