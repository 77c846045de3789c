"""Tiny repos shaped like the rig's, written deterministically (same bytes, so the same blob
ids, LFS oids and commit shas, on every run and machine).

- ``dbirks/Qwen3.8-27B-W4A16-AutoRound`` — the W4A16 layout: ``config.json``, generation and
  tokenizer files, ``chat_template.jinja``, ``model.safetensors.index.json`` and two real (tiny)
  safetensors shards stored as LFS files, plus ``README.md`` and ``.gitattributes`` that the
  spec's include globs leave out. Same id as the spec's default, so the default spec locks
  against this hub.
- ``rigkit-test/Qwen3.8-27B-DFlash2-W4A16`` — a drafter, one shard.
- ``rigkit-test/Qwen3.8-27B-GGUF`` — ``Qwen3.8-27B-Q4_K_M.gguf`` (a real tiny llama GGUF from
  :mod:`tests.bench.tiny_gguf`) and a ``Q8_0`` sibling the include glob must skip.
- ``rigkit-test/Strata-Coder-GGUF`` — ``strata-coder-Q4_K_M.gguf``, another real tiny GGUF.

Usage: ``python -m tests.hub.repos DIR`` writes ``DIR/<owner>/<name>/<files>``.
"""

from __future__ import annotations

import json
import random
import struct
import sys
from pathlib import Path

W4A16 = "dbirks/Qwen3.8-27B-W4A16-AutoRound"
DFLASH2 = "rigkit-test/Qwen3.8-27B-DFlash2-W4A16"
GGUF = "rigkit-test/Qwen3.8-27B-GGUF"
STRATA = "rigkit-test/Strata-Coder-GGUF"

GITATTRIBUTES = "*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.gguf filter=lfs diff=lfs merge=lfs -text\n"


def safetensors_bytes(tensors: dict[str, tuple[int, int]], seed: int) -> bytes:
    """A valid safetensors file: 8-byte little-endian header length, JSON header, then the
    F32 data of each ``name: (rows, cols)`` tensor (seeded pseudo-random bytes)."""
    rng = random.Random(seed)
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (rows, cols) in sorted(tensors.items()):
        n = rows * cols * 4
        header[name] = {"dtype": "F32", "shape": [rows, cols], "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + rng.randbytes(offset)


def _config(n_layers: int) -> dict:
    """A ``config.json`` shaped like the family's (Qwen3.5's ``Qwen3_5ForConditionalGeneration``:
    a ``text_config`` with ``layer_types``, three linear-attention (Gated DeltaNet) layers to one
    full-attention layer, ``mamba_ssm_dtype``), its sizes shrunk; a one-layer drafter is dense."""
    quant = {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True}
    if n_layers < 4:
        return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256,
                "num_hidden_layers": n_layers, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                "max_position_embeddings": 262144, "quantization_config": quant, "torch_dtype": "bfloat16"}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "quantization_config": quant,
            "text_config": {"model_type": "qwen3_5_text", "dtype": "bfloat16", "hidden_size": 256,
                            "num_hidden_layers": n_layers, "num_attention_heads": 4, "num_key_value_heads": 2,
                            "head_dim": 64, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
                            "linear_conv_kernel_dim": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                            "linear_key_head_dim": 32, "linear_value_head_dim": 32, "mamba_ssm_dtype": "float32",
                            "max_position_embeddings": 262144}}


def _w4a16_files(shard_rows: int, n_shards: int, name: str, n_layers: int = 1) -> dict[str, bytes]:
    shards: dict[str, dict[str, tuple[int, int]]] = {}
    weight_map = {}
    for i in range(n_shards):
        fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        tensors = {f"model.layers.{i}.mlp.down_proj.qweight": (shard_rows, 256),
                   f"model.layers.{i}.mlp.down_proj.scales": (16, 256)}
        shards[fname] = tensors
        weight_map.update({t: fname for t in tensors})
    files = {fname: safetensors_bytes(t, seed=i + len(name)) for i, (fname, t) in enumerate(sorted(shards.items()))}
    total = sum(len(b) for b in files.values())
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2).encode()
    files["config.json"] = json.dumps(_config(n_layers), indent=2).encode()
    files["generation_config.json"] = b'{\n  "do_sample": true,\n  "temperature": 0.6\n}\n'
    files["tokenizer.json"] = json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}).encode()
    files["tokenizer_config.json"] = b'{\n  "model_max_length": 262144\n}\n'
    files["chat_template.jinja"] = b"{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}\n"
    files["README.md"] = f"# {name}\n\nA tiny test repo shaped like the real one.\n".encode()
    files[".gitattributes"] = GITATTRIBUTES.encode()
    return files


def _gguf_bytes(tmp: Path, n_embd: int, reasoning: bool = False) -> bytes:
    from tests.bench.tiny_gguf import write_tiny_gguf

    out = tmp / f"tiny-{n_embd}-{int(reasoning)}.gguf"
    write_tiny_gguf(str(out), n_embd=n_embd, reasoning=reasoning)
    return out.read_bytes()


def repo_files(tmp: Path) -> dict[str, dict[str, bytes]]:
    """``{repo_id: {path: bytes}}`` for every test repo; ``tmp`` is scratch space for the GGUFs."""
    q4 = _gguf_bytes(tmp, 64)
    q8 = _gguf_bytes(tmp, 32)
    strata = _gguf_bytes(tmp, 64, reasoning=True)
    return {
        W4A16: _w4a16_files(shard_rows=512, n_shards=2, name=W4A16, n_layers=4),  # 2 x ~0.5 MiB LFS shards
        DFLASH2: _w4a16_files(shard_rows=64, n_shards=1, name=DFLASH2),
        GGUF: {"Qwen3.8-27B-Q4_K_M.gguf": q4, "Qwen3.8-27B-Q8_0.gguf": q8,
               "README.md": b"# GGUF\n", ".gitattributes": GITATTRIBUTES.encode()},
        STRATA: {"strata-coder-Q4_K_M.gguf": strata, "README.md": b"# Strata coder\n",
                 ".gitattributes": GITATTRIBUTES.encode()},
    }


def write_repos(root: Path) -> Path:
    """Write every test repo under ``root/<owner>/<name>/`` and return ``root``."""
    root = Path(root)
    scratch = root / ".scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    for repo_id, files in repo_files(scratch).items():
        for rel, data in files.items():
            path = root / repo_id / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    for p in scratch.iterdir():
        p.unlink()
    scratch.rmdir()
    return root


if __name__ == "__main__":
    print(write_repos(Path(sys.argv[1])))
