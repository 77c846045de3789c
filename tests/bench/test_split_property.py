"""Issue 27, item 6: however a stream is split into reads, the bench reads the same events,
the same counts and the same verdict as from the whole stream in one read — for every stream
the tests record or generate (tests/bench/streams.py: vLLM, llama.cpp, llama-cpp-python,
Ollama, inline <think>; LF/CRLF/CR, BOM, pings, extra fields, multi-line data, invalid UTF-8;
every ending)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.bench.client import consume
from rigkit.bench.sse import SSEParser

from .streams import DIALECTS, ENDINGS, RECORDED, build

TEXT = st.text(alphabet=st.sampled_from(list("ab <>/thinké☃😀\"\\")), min_size=1, max_size=6)


@st.composite
def streams(draw):
    """A generated stream (bytes) and its expected reading."""
    if draw(st.integers(0, 5)) == 0:
        return RECORDED[draw(st.sampled_from(sorted(RECORDED)))]
    dialect = draw(st.sampled_from(DIALECTS))
    reasoning = draw(st.lists(TEXT.filter(lambda t: "<" not in t and ">" not in t),
                              min_size=1 if dialect == "inline-think" else 0, max_size=3))
    answer = draw(st.lists(TEXT.filter(lambda t: "<" not in t), min_size=1, max_size=4))
    answer[0] = "A" + answer[0]  # one non-blank answer piece
    return build(dialect, reasoning, answer,
                 tokens_per_chunk=draw(st.integers(1, 4)),
                 eol=draw(st.sampled_from(["\n", "\r\n", "\r"])),
                 pings=draw(st.integers(0, 2)), extras=draw(st.booleans()),
                 bom=draw(st.booleans()), ending=draw(st.sampled_from(ENDINGS)),
                 multiline=draw(st.booleans()), invalid_utf8=draw(st.booleans()))


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


def reading(parts: list[bytes]):
    """The record (every field, timings included: one clock value for every read) and the
    parser's view of ``parts``."""
    r = consume([(p, 1.0) for p in parts], t0=1.0)
    return r.to_record()


def events(parts: list[bytes], data_only: bool):
    p = SSEParser()
    out = []
    for part in parts:
        out += p.feed_data(part) if data_only else [e.data for e in p.feed(part)]
    out += [e.data for e in p.close()]
    return out, p.errors, p.comments, p.open_event


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.lists(st.integers(0, 10_000), max_size=12))
def test_any_split_reads_the_same_events_counts_and_verdict(stream, cuts):
    data, expected = stream
    parts = split(data, cuts)
    whole = reading([data])
    assert reading(parts) == whole
    assert (whole["ok"], whole["error_kind"]) == (expected.ok, expected.error_kind), whole["error"]
    if expected.ok:
        assert (whole["completion_tokens"], whole["tokens_source"]) == (
            expected.completion_tokens, expected.tokens_source)
    full = events([data], data_only=False)
    assert events(parts, data_only=True) == full
    assert events(parts, data_only=False) == full


@settings(max_examples=150, deadline=None)
@given(streams(), st.integers(1, 7))
def test_reads_of_one_byte_or_a_few_read_the_same_as_one_read(stream, size):
    data, _ = stream
    parts = [data[i:i + size] for i in range(0, len(data), size)]
    assert reading(parts) == reading([data])
