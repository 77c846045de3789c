"""Workload presets and the verbatim check.

Workloads, in the order they run (quoting last: a long-context crash must not hide the chat
figures, ``notes/bench.md`` §4.12):

- ``warmup`` — discarded: one long prompt (compiles the prefill kernels and CUDA-graph
  buckets) and one short sampled chat.
- ``chat-greedy`` — four thinking-heavy prompts at temperature 0.
- ``chat-sampled`` — the same prompts at temperature 0.7 with a fixed seed.
- ``quoting`` — a long generated document with a marked passage the model must reproduce
  verbatim (checked exactly), a unique nonce first so the prefix cache cannot fake prefill.
- ``long`` — one generation of the preset's ``long_tokens`` (``ignore_eos``: it runs to the end),
  long enough to cross the acceptance collapse operators report on long runs (to 0% after ~14.5k
  generated tokens, INT4 27B with MTP: club-3090 #1052); speculative decoding's acceptance is read in
  windows of ``long_window_tokens`` along it (:class:`rigkit.bench.metrics.WindowReader`). Not in the
  default run (:data:`DEFAULT_WORKLOADS`): on the rig it is ~3 minutes of decode (20k tokens at
  118 tok/s), more than the deploy's smoke spends on everything else; ``--workload long`` asks for it.

Every prompt starts with a run nonce for the same reason. Sizes are in tokens; the text is
sized with a measured characters-per-token ratio (the server's ``/tokenize``), so the rig's
29k-token prompt is 29k tokens for the rig's tokenizer.
"""

from __future__ import annotations

import difflib
import random
from dataclasses import dataclass, field
from typing import Any

WORKLOAD_NAMES = ("warmup", "chat-greedy", "chat-sampled", "quoting", "long")
#: The measured workloads run when none is named (``long`` only on request: module doc).
DEFAULT_WORKLOADS = ("chat-greedy", "chat-sampled", "quoting")
QUOTE_START, QUOTE_END = "<<<QUOTE START>>>", "<<<QUOTE END>>>"
LONG_PROMPT = ("Write a long, detailed field manual for surveying a tidal estuary: equipment, "
               "daily procedure, sources of error, worked examples with numbers, and a glossary. "
               "Keep writing until you are stopped.")


@dataclass(frozen=True)
class Preset:
    """Operator settings for one kind of target. Token counts in tokens.

    + repetitions: runs of each chat prompt (4 prompts × repetitions samples).
    + chat_max_tokens: budget for thinking plus answer on chat prompts.
    + quoting_tokens / quote_tokens: size of the quoting prompt / of the marked passage.
    + quoting_max_tokens: budget for the quoting answer (thinking headroom + the passage).
    + quoting_runs: quoting repetitions, each with a fresh nonce.
    + extra_body: request extras, e.g. ``chat_template_kwargs.reasoning_effort``.
    + long_tokens / long_window_tokens: the ``long`` workload's generation and the windows its
      acceptance is read in (tokens).
    """

    name: str
    repetitions: int
    chat_max_tokens: int
    warmup_prompt_tokens: int
    quoting_tokens: int
    quote_tokens: int
    quoting_max_tokens: int
    quoting_runs: int
    min_context_tokens: int
    extra_body: dict[str, Any] = field(default_factory=dict)
    long_tokens: int = 20_480
    long_window_tokens: int = 2_048


PRESETS: dict[str, Preset] = {
    # The operator's settings for the rig (notes/hyperqwen.md: house clients send
    # reasoning_effort=medium; DESIGN.md: the 29k-token quoting prompt).
    "rig": Preset(
        name="rig", repetitions=3, chat_max_tokens=8192, warmup_prompt_tokens=8192,
        quoting_tokens=29_000, quote_tokens=1_500, quoting_max_tokens=12_288, quoting_runs=3,
        min_context_tokens=29_000 + 12_288,
        extra_body={"chat_template_kwargs": {"reasoning_effort": "medium"}},
    ),
    # A CPU llama.cpp server with the tiny GGUF (8k context, ~1 token per character).
    "small": Preset(
        name="small", repetitions=1, chat_max_tokens=48, warmup_prompt_tokens=1_000,
        quoting_tokens=600, quote_tokens=40, quoting_max_tokens=96, quoting_runs=1,
        min_context_tokens=2_048, long_tokens=256, long_window_tokens=32,
    ),
}

CHAT_PROMPTS: tuple[tuple[str, str], ...] = (
    ("bat-and-ball", "A bat and a ball cost $1.10 in total. The bat costs $1.00 more than the "
     "ball. How much does the ball cost? Think it through step by step, check the answer, "
     "then state it in one line."),
    ("sevens", "How many times does the digit 7 appear when you write out every integer from "
     "1 to 1000? Reason carefully by place value before answering."),
    ("boxes", "Three boxes are labelled 'apples', 'oranges' and 'apples and oranges'. Every "
     "label is wrong. You may take one fruit from one box without looking inside. Which box "
     "do you pick from, and how do you then relabel all three? Explain your reasoning."),
    ("sqrt2", "Prove that the square root of 2 is irrational. Then, in one sentence, explain "
     "which step of the proof would fail for the square root of 4."),
)

_NAMES = ("Marrow Ridge", "Caldwell Flats", "the Ostend weir", "Pell Harbour", "Yarrow Fen",
          "the north culvert", "Brisk Hollow", "Tamsin Quay", "the old tannery", "Vale Cross")
_ACTORS = ("the survey crew", "the night clerk", "Inspector Halloran", "the ferry master",
           "two apprentices", "the county assessor", "a visiting geologist", "the archivist")
_VERBS = ("logged", "counted", "recorded", "misfiled", "re-measured", "catalogued", "sealed")
_THINGS = ("readings of basalt", "crates of tinned pears", "rolls of survey film",
           "barometer logs", "sacks of lime", "copper fittings", "tide tables", "ledgers")
_TAILS = ("before noon", "after the bell", "in fading light", "without a witness",
          "under protest", "twice over", "by lamplight", "as the tide turned")


def make_document(n_chars: int, seed: int) -> list[str]:
    """Deterministic prose for long prompts: about ``n_chars`` characters as a list of
    sentences (each ending with ``" "`` or ``"\\n"``). Same seed, same text."""
    rng = random.Random(seed)
    out: list[str] = []
    total = 0
    entry = 0
    while total < n_chars:
        entry += 1
        s = (f"Entry {entry:04d}: {rng.choice(_ACTORS)} at {rng.choice(_NAMES)} "
             f"{rng.choice(_VERBS)} {rng.randint(2, 987)} {rng.choice(_THINGS)} "
             f"{rng.choice(_TAILS)}.")
        s += "\n" if entry % 5 == 0 else " "
        out.append(s)
        total += len(s)
    return out


@dataclass
class RequestSpec:
    """One request of a workload: ``payload`` (OpenAI chat body without ``stream``),
    ``prompt_id``, ``repetition`` and, for quoting, ``expected`` (the passage)."""

    prompt_id: str
    repetition: int
    payload: dict[str, Any]
    expected: str | None = None


@dataclass
class Workload:
    """A named list of requests; ``discard`` True keeps them out of the figures; ``not_run``
    (a sentence) says why it cannot run on this target, and then nothing is sent."""

    name: str
    requests: list[RequestSpec]
    discard: bool = False
    temperature: float | None = None
    not_run: str | None = None
    window_tokens: int | None = None  # ``long``: read acceptance in windows of this many tokens


def _body(model: str | None, content: str, *, max_tokens: int, temperature: float,
          extra: dict[str, Any], seed: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}],
                            "max_tokens": max_tokens, "temperature": temperature}
    if model:
        body["model"] = model
    if seed is not None:
        body["seed"] = seed
    body.update(extra)
    return body


def build_quoting_prompt(nonce: str, n_tokens: int, quote_tokens: int,
                         chars_per_token: float, seed: int = 29) -> tuple[str, str]:
    """Return ``(prompt, passage)``: a prompt of about ``n_tokens`` tokens that starts with
    ``nonce`` and holds a marked passage of about ``quote_tokens`` tokens in its middle
    (between :data:`QUOTE_START` and :data:`QUOTE_END` lines)."""
    head = (f"Run {nonce}.\nBelow is a document. Somewhere inside it one passage is marked "
            f"between the lines {QUOTE_START} and {QUOTE_END}. Reproduce that passage exactly, "
            f"character for character, with nothing before or after it.\n\n")
    tail = "\n\nNow reproduce the marked passage verbatim."
    quote_chars = max(int(quote_tokens * chars_per_token), 1)
    budget = max(int(n_tokens * chars_per_token) - len(head) - len(tail) - 2 * len(QUOTE_END),
                 2 * quote_chars)
    sentences = make_document(budget, seed)
    mid = len(sentences) // 2
    k, got = mid, 0
    while k < len(sentences) and got < quote_chars:
        got += len(sentences[k])
        k += 1
    passage = "".join(sentences[mid:k]).strip()
    doc = ("".join(sentences[:mid]).rstrip() + f"\n{QUOTE_START}\n{passage}\n{QUOTE_END}\n"
           + "".join(sentences[k:]))
    return head + doc + tail, passage


def quoting_sizes(preset: Preset, quoting_tokens: int | None = None) -> tuple[int, int]:
    """``(prompt tokens, passage tokens)`` for the quoting workload: the passage is the
    preset's, capped at an eighth of the prompt."""
    n_tok = quoting_tokens or preset.quoting_tokens
    return n_tok, min(preset.quote_tokens, max(n_tok // 8, 8))


def build_workloads(preset: Preset, names: list[str], *, model: str | None, nonce: str,
                    chars_per_token: float = 4.0, chat_max_tokens: int | None = None,
                    quoting_tokens: int | None = None,
                    sampled_temperature: float = 0.7,
                    quoting_chars_per_token: float | None = None) -> list[Workload]:
    """Workloads for ``names`` in canonical order (see the module doc). ``chars_per_token``
    sizes the long prompts; ``quoting_chars_per_token`` (default the same) the quoting one.

    Raises ValueError for an unknown workload name.
    """
    for n in names:
        if n not in WORKLOAD_NAMES:
            raise ValueError(f"unknown workload {n!r}; choose from {', '.join(WORKLOAD_NAMES)}")
    extra = preset.extra_body
    max_tokens = chat_max_tokens or preset.chat_max_tokens
    out: list[Workload] = []
    for name in WORKLOAD_NAMES:
        if name not in names:
            continue
        reqs: list[RequestSpec] = []
        if name == "warmup":
            text = "".join(make_document(int(preset.warmup_prompt_tokens * chars_per_token), 7))
            reqs.append(RequestSpec("long", 0, _body(
                model, f"Run {nonce}-w.\n{text}\n\nSummarise the document above in one sentence.",
                max_tokens=max_tokens, temperature=0.0, extra=extra)))
            reqs.append(RequestSpec("short", 0, _body(
                model, f"Run {nonce}-w. Say hello in five words.", max_tokens=max_tokens,
                temperature=0.7, extra=extra, seed=1)))
            out.append(Workload(name, reqs, discard=True))
        elif name in ("chat-greedy", "chat-sampled"):
            temp = 0.0 if name == "chat-greedy" else sampled_temperature
            for rep in range(preset.repetitions):
                for i, (pid, prompt) in enumerate(CHAT_PROMPTS):
                    seed = 1000 + 10 * rep + i if temp else None
                    reqs.append(RequestSpec(pid, rep, _body(
                        model, f"Run {nonce}-{name}-{rep}.\n{prompt}", max_tokens=max_tokens,
                        temperature=temp, extra=extra, seed=seed)))
            out.append(Workload(name, reqs, temperature=temp))
        elif name == "long":
            body = _body(model, f"Run {nonce}-long.\n{LONG_PROMPT}", max_tokens=preset.long_tokens,
                         temperature=0.0, extra=extra)
            body["ignore_eos"] = True  # vLLM's and llama.cpp's sampling extra: generate max_tokens, no early stop
            reqs.append(RequestSpec("long", 0, body))
            out.append(Workload(name, reqs, temperature=0.0, window_tokens=preset.long_window_tokens))
        else:
            n_tok, quote_tok = quoting_sizes(preset, quoting_tokens)
            for rep in range(preset.quoting_runs):
                prompt, passage = build_quoting_prompt(
                    f"{nonce}-q{rep}", n_tok, quote_tok, quoting_chars_per_token or chars_per_token)
                reqs.append(RequestSpec("quote", rep, _body(
                    model, prompt, max_tokens=preset.quoting_max_tokens, temperature=0.0,
                    extra=extra), expected=passage))
            out.append(Workload(name, reqs, temperature=0.0))
    return out


@dataclass
class VerbatimResult:
    """Outcome of the exact check: ``passed``; ``first_diff`` (0-based character offset in the
    normalised texts, None when equal) with its 1-based ``line``/``column``; lengths in
    characters; short excerpts at the difference; ``similarity`` (difflib ratio, 0–1)."""

    passed: bool
    first_diff: int | None
    line: int | None
    column: int | None
    expected_chars: int
    got_chars: int
    expected_excerpt: str
    got_excerpt: str
    similarity: float

    def message(self) -> str:
        """One line for the operator."""
        if self.passed:
            return f"verbatim PASS ({self.expected_chars} characters)"
        return (f"verbatim FAIL: answer differs from the quoted passage at character "
                f"{self.first_diff} (line {self.line}, column {self.column}): expected "
                f"{self.expected_excerpt!r}, got {self.got_excerpt!r}")


def normalise(text: str) -> str:
    """CRLF/CR → LF, trailing whitespace removed from every line and from both ends."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


def verbatim_check(expected: str, got: str) -> VerbatimResult:
    """Compare ``got`` (the answer, thinking excluded) with ``expected`` exactly after
    :func:`normalise`; report the first differing position."""
    a, b = normalise(expected), normalise(got)
    if a == b:
        return VerbatimResult(True, None, None, None, len(a), len(b), "", "", 1.0)
    i = 0
    n = min(len(a), len(b))
    while i < n and a[i] == b[i]:
        i += 1
    line = a.count("\n", 0, i) + 1
    col = i - (a.rfind("\n", 0, i) + 1) + 1
    sim = difflib.SequenceMatcher(None, a[:20_000], b[:20_000], autojunk=False).quick_ratio() \
        if max(len(a), len(b)) > 5_000 else \
        difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
    return VerbatimResult(False, i, line, col, len(a), len(b), a[i:i + 24], b[i:i + 24],
                          round(sim, 4))


#: Fewer parameters than this and a model cannot follow the quoting instruction at all (the
#: sandbox's tiny GGUFs are bigram chains of ~0.1M); the smallest instruction models that copy
#: text are ~1e8 (SmolLM-135M). Below it a verbatim FAIL would judge the model, not the rig.
MIN_QUOTING_PARAMS = 100_000_000
#: Tokens the chat template adds around a user message (role markers), as headroom.
TEMPLATE_TOKENS = 32


def _prompt_chars(spec: RequestSpec) -> int:
    return sum(len(m.get("content") or "") for m in spec.payload.get("messages") or [])


def mark_unrunnable(workloads: list[Workload], *, n_ctx: int | None, n_params: int | None,
                    chars_per_token: float, quoting_chars_per_token: float | None = None,
                    min_quoting_params: int = MIN_QUOTING_PARAMS) -> None:
    """Set :attr:`Workload.not_run` (a sentence naming the figures and where they come from)
    on each workload that cannot run on this target, so it is reported NOT-RUN, not FAIL:

    - its largest request needs more context than one request may use: prompt tokens
      (characters / ``chars_per_token``, plus :data:`TEMPLATE_TOKENS`) + ``max_tokens`` >
      ``n_ctx`` (tokens; None: unknown, nothing is marked) — the server would answer HTTP 400;
    - ``quoting``, when the model has fewer than ``min_quoting_params`` parameters
      (``n_params`` from llama.cpp; None: unknown, it runs).
    """
    for wl in workloads:
        if not wl.requests:
            continue
        cpt = (quoting_chars_per_token or chars_per_token) if wl.name == "quoting" else chars_per_token
        need = max(int(_prompt_chars(s) / cpt) + TEMPLATE_TOKENS + int(s.payload.get("max_tokens") or 0)
                   for s in wl.requests)
        if n_ctx and need > n_ctx:
            biggest = max(wl.requests, key=_prompt_chars)
            wl.not_run = (f"needs ~{need:,} tokens of context (a ~{int(_prompt_chars(biggest) / cpt):,}"
                          f"-token prompt + max_tokens {biggest.payload.get('max_tokens')}); the "
                          f"server allows {n_ctx:,} per request (its reported context); use a "
                          f"smaller --preset, --quoting-tokens or --max-tokens")
        elif wl.name == "quoting" and n_params is not None and n_params < min_quoting_params:
            wl.not_run = (f"the model has {n_params:,} parameters (the server's /v1/models "
                          f"meta.n_params), under the {min_quoting_params:,} a model needs to "
                          f"follow the quoting instruction; a verbatim FAIL would judge the "
                          f"model, not the rig")
