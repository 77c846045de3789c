"""gguf-py's reading of a whole GGUF file, summarized as :func:`rigkit.spec.gguf_header.summarize`
summarizes its own parse: the oracle for the summary (rigkit's reader took this from gguf-py's
``GGUFReader`` until issue 62; gguf-py is a test dependency now)."""

from __future__ import annotations

from typing import Any


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


def gguf_py_summary(reader: Any) -> dict[str, Any]:
    """The summary of a :class:`gguf.GGUFReader` over a whole file (the keys of
    :func:`rigkit.spec.gguf_header.summarize`), from gguf-py's own parse."""
    from gguf import GGMLQuantizationType

    arch = _value(reader, "general.architecture")

    def k(name: str) -> Any:
        return _value(reader, f"{arch}.{name}")

    n_layer = int(k("block_count"))
    head_count = _int_or_list(k("attention.head_count"))
    head_count_kv = _int_or_list(k("attention.head_count_kv"))
    n_embd = int(k("embedding_length"))
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
        "architecture": arch, "block_count": n_layer, "context_length": int(k("context_length") or 0),
        "embedding_length": n_embd, "feed_forward_length": _int_or_list(k("feed_forward_length")) or 0,
        "vocab_size": int(vocab), "head_count": head_count,
        "head_count_kv": head_count if head_count_kv is None else head_count_kv,
        "key_length": int(k("attention.key_length") or default_head),
        "value_length": int(k("attention.value_length") or default_head),
        "tensor_bytes": {"layers": layers, "input": inputs, "output": output, "tied_output": tied},
        "tensor_types": dict(sorted(types.items())), "header_bytes": int(reader.data_offset),
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
