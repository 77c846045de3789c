"""Write a tiny, deterministic llama-architecture GGUF for integration tests.

The file is a *real* GGUF that llama.cpp (llama-server, llama-cpp-python,
xllamacpp) loads and runs with its normal code paths (tokenizer, chat
template, KV cache, attention, sampling); only the weights are synthetic.

Design
------
* arch "llama", F32 tensors, default 2 layers x 64-dim, 4 heads, ffn 128,
  context_length 8192.  ~0.5 MB on disk.
* tokenizer: GPT-2 style byte-level BPE ("gpt2"/"gpt-2"): all 256 byte
  tokens (so *any* UTF-8 text tokenizes, ~1 token per character for text
  outside the small word list) + a few dozen whole-word tokens built by
  merges + control tokens <|bos|> <|system|> <|user|> <|assistant|> <|end|>
  + user-defined <think> / </think>.
* weights: transformer blocks get small seeded random weights (std 0.02) so
  attention/FFN really compute; embeddings/output are built so the model is
  effectively a *bigram chain*: whatever the prompt, the next tokens walk a
  fixed sentence that loops forever ("Hello! This is a tiny test model ...").
  Logit margin is ~32 nats, so output is identical under greedy or
  temperature sampling; the model never emits EOS on its own, so max_tokens
  is always reached (finish_reason "length").
* --reasoning: the chain starts with "<think>Let me think about it</think>"
  once before looping over the answer sentence, and the chat template renders
  reasoning_content inside <think></think>, so servers with a reasoning
  parser (llama.cpp --reasoning-format deepseek / auto) split
  reasoning_content from content.
* --eos-after N: make the loop end with <|end|> after N answer-words so a
  natural "stop" finish can be tested too (0 = never).

Folded from the project's llama.cpp prototype (reference/llama/make_tiny_gguf.py) so tests
never read outside the checkout.  Tests call :func:`write_tiny_gguf`.

Usage:  python -m tests.bench.tiny_gguf OUT.gguf [--reasoning] [--n-embd 64] ...
Needs: gguf (tested with 0.19.0) and numpy.  Runs in well under a second.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import gguf

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|' + message['role'] + '|>\\n' -}}"
    "{%- if message['role'] == 'assistant' and message['reasoning_content'] is defined"
    " and message['reasoning_content'] -%}"
    "{{- '<think>' + message['reasoning_content'] + '</think>' -}}"
    "{%- endif -%}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- elif message['content'] -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)

THINK_WORDS = ["<think>", "Let", " me", " think", " about", " it", "</think>"]
ANSWER_WORDS = ["Hello", "!", " This", " is", " a", " tiny", " test", " model",
                " for", " streaming", " benchmarks", ".", " The", " quick",
                " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".\n"]
CONTROL = ["<|bos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|pad|>"]
USER_DEFINED = ["<think>", "</think>"]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode map."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build_vocab():
    b2u = bytes_to_unicode()
    tokens: list[str] = []
    types: list[int] = []
    index: dict[str, int] = {}

    def add(tok: str, ttype: int) -> int:
        if tok in index:
            return index[tok]
        index[tok] = len(tokens)
        tokens.append(tok)
        types.append(ttype)
        return index[tok]

    N, C, U = (gguf.TokenType.NORMAL, gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED)
    for t in CONTROL:
        add(t, C)
    for t in USER_DEFINED:
        add(t, U)
    for b in range(256):
        add(b2u[b], N)
    merges: list[str] = []
    word_ids: dict[str, int] = {}
    for w in ANSWER_WORDS + THINK_WORDS:
        if w in USER_DEFINED:
            word_ids[w] = index[w]
            continue
        enc = "".join(b2u[b] for b in w.encode("utf-8"))
        # left-to-right merge path: (enc[:i], enc[i]) for i = 1..len-1
        for i in range(1, len(enc)):
            left, right = enc[:i], enc[i]
            if enc[: i + 1] not in index:
                merges.append(f"{left} {right}")
                add(enc[: i + 1], N)
        word_ids[w] = index[enc]
    # pad vocab to a multiple of 64 with unused normal tokens (keeps shapes tidy)
    k = 0
    while len(tokens) % 64:
        add(f"<|unused{k}|>", gguf.TokenType.UNUSED)
        k += 1
    return tokens, types, merges, word_ids, index


def add_tokenizer(w, tokens, types, merges, index) -> None:
    """Write :func:`build_vocab`'s byte-level BPE tokenizer into GGUFWriter ``w`` (gpt2 model, gpt-2
    pre-tokenizer, bos ``<|bos|>``, eos ``<|end|>``), as llama.cpp's loader reads it."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(index["<|bos|>"])
    w.add_eos_token_id(index["<|end|>"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--reasoning", action="store_true", help="emit <think>...</think> before the answer")
    ap.add_argument("--eos-after", type=int, default=0, help="emit <|end|> after N answer tokens (0 = never)")
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-head-kv", type=int, default=4)
    ap.add_argument("--n-ff", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--name", default="tiny-test-llama")
    a = ap.parse_args(argv)

    tokens, types, merges, word_ids, index = build_vocab()
    n_vocab, d = len(tokens), a.n_embd
    head_dim = d // a.n_head
    assert head_dim * a.n_head == d and a.n_head % a.n_head_kv == 0

    # ---- the bigram chain -------------------------------------------------
    chain = ([word_ids[w] for w in THINK_WORDS] if a.reasoning else []) + [word_ids[w] for w in ANSWER_WORDS]
    loop_start = len(THINK_WORDS) if a.reasoning else 0
    # next-token map over chain positions
    nxt = {i: i + 1 for i in range(len(chain) - 1)}
    nxt[len(chain) - 1] = loop_start
    eos_pos = None
    if a.eos_after > 0:
        eos_pos = loop_start + min(a.eos_after, len(ANSWER_WORDS)) - 1
    assert len(set(chain)) == len(chain), "chain tokens must be unique (bigram model)"
    if len(chain) + 1 > d:
        sys.exit(f"n_embd {d} too small for chain ({len(chain) + 1} dims needed)")

    rng = np.random.default_rng(a.seed)
    tok_embd = np.zeros((n_vocab, d), dtype=np.float32)
    output = np.zeros((n_vocab, d), dtype=np.float32)
    default_dim = d - 1
    margin = 4.0  # logit = margin * sqrt(d) after RMSNorm (=32 for d=64)
    # chain token at position k lives on dimension k; everything else on default_dim
    for pos, tid in enumerate(chain):
        tok_embd[tid, pos] = 1.0
    in_chain = set(chain)
    for tid in range(n_vocab):
        if tid not in in_chain:
            tok_embd[tid, default_dim] = 1.0
    output[chain[0], default_dim] = margin  # any prompt -> start of chain
    for pos, tid in enumerate(chain):
        succ = chain[nxt[pos]]
        if eos_pos is not None and pos == eos_pos:
            succ = index["<|end|>"]
        output[succ, pos] = margin

    # ---- write --------------------------------------------------------------
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(a.name)
    w.add_context_length(a.n_ctx)
    w.add_embedding_length(d)
    w.add_block_count(a.n_layer)
    w.add_feed_forward_length(a.n_ff)
    w.add_head_count(a.n_head)
    w.add_head_count_kv(a.n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    add_tokenizer(w, tokens, types, merges, index)
    w.add_eot_token_id(index["<|end|>"])
    w.add_pad_token_id(index["<|pad|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    def rnd(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    kv = head_dim * a.n_head_kv
    w.add_tensor("token_embd.weight", tok_embd)
    for i in range(a.n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rnd(d, d))
        w.add_tensor(p + "attn_k.weight", rnd(kv, d))
        w.add_tensor(p + "attn_v.weight", rnd(kv, d))
        w.add_tensor(p + "attn_output.weight", rnd(d, d))
        w.add_tensor(p + "ffn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rnd(a.n_ff, d))
        w.add_tensor(p + "ffn_up.weight", rnd(a.n_ff, d))
        w.add_tensor(p + "ffn_down.weight", rnd(d, a.n_ff))
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor("output.weight", output)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}: vocab={n_vocab} merges={len(merges)} n_embd={d} "
          f"layers={a.n_layer} chain={len(chain)} reasoning={a.reasoning}")
    return 0


def write_tiny_gguf(path: str, *, reasoning: bool = False, eos_after: int = 0,
                    n_embd: int = 64, n_layer: int = 2, n_ff: int = 128) -> str:
    """Write the GGUF to ``path`` (see the module doc) and return ``path``."""
    argv = [path, "--eos-after", str(eos_after), "--n-embd", str(n_embd),
            "--n-layer", str(n_layer), "--n-ff", str(n_ff)]
    if reasoning:
        argv.append("--reasoning")
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        main(argv)
    return path


if __name__ == "__main__":
    raise SystemExit(main())
