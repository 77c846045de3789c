"""Streams in every dialect the bench meets, as bytes, with what a right reading of each says.

Recorded: llama.cpp's server (``notes/llama-proto.md`` §4, include_usage, reasoning_content,
timings) and llama-cpp-python's (spaced JSON, no usage). Generated (:func:`build`): vLLM
(``delta.reasoning``, several tokens per chunk, usage with ``completion_tokens_details``),
llama.cpp (``reasoning_content``, ``:`` pings, ``timings``), llama-cpp-python (no usage),
Ollama (``content: ""`` beside ``reasoning``) and inline ``<think>`` — each with any line
ending (LF, CRLF, CR), a BOM, ``event:``/``id:``/``retry:`` fields, JSON split over several
``data:`` lines, invalid UTF-8 inside a string, and any ending (``[DONE]``, a clean end without
it, llama.cpp's ``error:`` line before ``[DONE]``, an error object, a cut before the finish).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

LLAMA_CPP_RECORDED = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1796018498,"id":"chatcmpl-Ngq4","model":"tiny","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"reasoning_content":"Let"}}],"created":1796018498,"id":"chatcmpl-Ngq4","model":"tiny","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"reasoning_content":" me"}}],"created":1796018498,"id":"chatcmpl-Ngq4","model":"tiny","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hello"}}],"created":1796018498,"id":"chatcmpl-Ngq4","model":"tiny","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"!"}}],"created":1796018498,"id":"chatcmpl-Ngq4","model":"tiny","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1796018498,"id":"chatcmpl-Ngq4","model":"tiny","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[],"created":1796018498,"id":"chatcmpl-Ngq4","model":"tiny","object":"chat.completion.chunk","usage":{"completion_tokens":6,"prompt_tokens":15,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":14}},"timings":{"cache_n":14,"prompt_n":1,"prompt_ms":0.406,"prompt_per_second":2463.05,"predicted_n":6,"predicted_ms":0.836,"predicted_per_second":4784.69}}\n\n'
    b'data: [DONE]\n\n'
)

LLAMA_CPP_PYTHON_RECORDED = (
    b'data: {"id": "chatcmpl-fc2b", "model": "tiny", "created": 1796018536, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": null, "finish_reason": null}]}\r\n\r\n'
    b'data: {"id": "chatcmpl-fc2b", "model": "tiny", "created": 1796018536, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " This"}, "logprobs": null, "finish_reason": null}]}\r\n\r\n'
    b'data: {"id": "chatcmpl-fc2b", "model": "tiny", "created": 1796018536, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}]}\r\n\r\n'
    b'data: [DONE]\r\n\r\n'
)


@dataclass(frozen=True)
class Expected:
    """What a right reading says: ``ok``, ``error_kind``, ``completion_tokens`` (None on a
    failure), ``tokens_source``."""

    ok: bool
    error_kind: str | None
    completion_tokens: int | None
    tokens_source: str | None


RECORDED = {
    "llama.cpp": (LLAMA_CPP_RECORDED, Expected(True, None, 6, "usage")),
    "llama-cpp-python": (LLAMA_CPP_PYTHON_RECORDED, Expected(True, None, 1, "chunk-estimate")),
}

DIALECTS = ("vllm", "llama.cpp", "llama-cpp-python", "ollama", "inline-think")
ENDINGS = ("done", "no-done", "error-line", "error-object", "cut")


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def build(dialect: str, reasoning: list[str], answer: list[str], *, tokens_per_chunk: int = 1,
          eol: str = "\n", pings: int = 0, extras: bool = False, bom: bool = False,
          ending: str = "done", multiline: bool = False, invalid_utf8: bool = False
          ) -> tuple[bytes, Expected]:
    """One stream in ``dialect`` (:data:`DIALECTS`) ending by ``ending`` (:data:`ENDINGS`):
    the bytes and the :class:`Expected` reading. ``answer`` must hold a non-blank piece."""
    events: list[tuple[str, object]] = []  # (kind, payload): kind data / ping / error-line
    spaced = dialect == "llama-cpp-python"
    events.append(("data", _chunk({"role": "assistant", "content": None if dialect == "llama.cpp" else ""})))
    for i, text in enumerate(reasoning):
        if pings and i == 0:
            events.extend([("ping", None)] * pings)
        if dialect == "inline-think":
            piece = ("<think>" if i == 0 else "") + text + ("</think>" if i == len(reasoning) - 1 else "")
            events.append(("data", _chunk({"content": piece})))
        elif dialect == "llama.cpp":
            events.append(("data", _chunk({"reasoning_content": text})))
        elif dialect == "ollama":
            events.append(("data", _chunk({"role": "assistant", "content": "", "reasoning": text})))
        elif dialect != "llama-cpp-python":
            events.append(("data", _chunk({"reasoning": text})))
    if invalid_utf8:
        events.append(("raw-content", None))
    for text in answer:
        events.append(("data", _chunk({"content": text})))
    n_chunks = sum(1 for k, p in events if k == "data" and _carries(p)) + (1 if invalid_utf8 else 0)
    completion = n_chunks * tokens_per_chunk
    if ending == "cut":
        pass
    else:
        if ending == "error-line":
            events.append(("error-line", {"code": 500, "message": "llama_decode failed",
                                          "type": "server_error"}))
        elif ending == "error-object":
            events.append(("data", {"error": {"message": "context length exceeded",
                                              "type": "BadRequestError", "code": 400}}))
        events.append(("data", _chunk({}, finish="stop")))
        if dialect == "vllm":
            events.append(("data", {"choices": [], "usage": {
                "prompt_tokens": 10, "completion_tokens": completion,
                "total_tokens": 10 + completion,
                "completion_tokens_details": {"reasoning_tokens": len(reasoning) * tokens_per_chunk}}}))
        elif dialect == "llama.cpp":
            events.append(("data", {"choices": [], "usage": {"prompt_tokens": 10,
                                                             "completion_tokens": completion},
                                    "timings": {"prompt_n": 10, "predicted_n": completion,
                                                "predicted_per_second": 100.0}}))
        elif dialect in ("ollama", "inline-think"):
            events.append(("data", {"choices": [], "usage": {"prompt_tokens": 10,
                                                             "completion_tokens": completion}}))
        if ending != "no-done":
            events.append(("done", None))
    out: list[bytes] = [b"\xef\xbb\xbf"] if bom else []
    e = eol.encode()
    for n, (kind, payload) in enumerate(events):
        if kind == "ping":
            out.append(b": ping" + e + e)
            continue
        if kind == "error-line":
            out.append(b"error: " + json.dumps(payload).encode() + e + e)
            continue
        lines: list[bytes] = []
        if extras and n % 3 == 1:
            lines += [b"event: message", b"id: %d" % n]
        if extras and n % 5 == 2:
            lines += [b"retry: 3000"]
        if extras and n % 4 == 3:  # an event of one empty data: line, then this one
            out.append(b"data:" + e + e)
        if kind == "done":
            lines.append(b"data: [DONE]")
        elif kind == "raw-content":  # a string holding bytes that are not UTF-8
            lines.append(b'data: {"choices":[{"index":0,"delta":{"content":"caf\xe9 \xff\xfe"}}]}')
        else:
            text = (json.dumps(payload, separators=(", ", ": ")) if spaced
                    else json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
            body = text.encode("utf-8")
            if multiline and len(body) > 20:
                cut = body.index(b",") + 1  # outside any string: split the JSON over two lines
                lines += [b"data: " + body[:cut], b"data:" + body[cut:]]
            else:
                lines.append(b"data: " + body)
        out.append(e.join(lines) + e + e)
    data = b"".join(out)
    if ending in ("error-line", "error-object"):
        kind = "stream-error"
        return data, Expected(False, kind, None, None)
    if ending == "cut":
        return data, Expected(False, "cut", None, None)
    if dialect == "llama-cpp-python":
        return data, Expected(ending == "done", None if ending == "done" else "cut",
                              n_chunks if ending == "done" else None,
                              "chunk-estimate" if ending == "done" else None)
    return data, Expected(True, None, completion, "usage")


def _carries(obj) -> bool:
    ch = (obj.get("choices") or [{}])[0] if isinstance(obj, dict) else {}
    d = ch.get("delta") or {}
    return bool(d.get("content") or d.get("reasoning") or d.get("reasoning_content"))
