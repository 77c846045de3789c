"""The SSE parser follows the WHATWG event-stream rules."""

from rigkit.bench.sse import SSEEvent, SSEParser


def test_multibyte_character_split_across_reads_is_reassembled():
    data = 'data: {"content": "naïve ☃"}\n\n'.encode()
    cut = data.index("☃".encode()) + 1  # inside the 3-byte snowman
    p = SSEParser()
    events = p.feed(data[:cut]) + p.feed(data[cut:])
    assert events == [SSEEvent(data='{"content": "naïve ☃"}')]


def test_crlf_lf_and_cr_all_end_lines_even_when_crlf_is_split():
    p = SSEParser()
    events = p.feed(b"data: a\r") + p.feed(b"\n\r\ndata: b\r\rdata: c\n\n")
    assert [e.data for e in events] == ["a", "b", "c"]


def test_comment_pings_are_counted_and_not_events():
    p = SSEParser()
    assert p.feed(b": ping\n\n: ping\n\ndata: x\n\n") == [SSEEvent(data="x")]
    assert p.comments == 2


def test_multiline_data_joined_with_lf_and_event_type_kept():
    p = SSEParser()
    assert p.feed(b"event: error\ndata: one\ndata:two\n\n") == [
        SSEEvent(data="one\ntwo", event="error")]


def test_event_without_its_blank_line_is_discarded_at_end_of_stream():
    p = SSEParser()
    assert p.feed(b"data: [DONE]") == []
    assert p.close() == []
    assert p.open_event is True


def test_leading_bom_is_dropped():
    p = SSEParser()
    assert p.feed(b"\xef\xbb\xbfdata: x\n\n") == [SSEEvent(data="x")]
