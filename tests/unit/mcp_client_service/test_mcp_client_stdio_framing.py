"""The stdio transport's framing of a server's stdout into lines (``split_lines``), byte by byte."""

from __future__ import annotations

from mcp_client_service.transport.stdio import split_lines


def _frame(chunks: list[bytes], max_line_bytes: int) -> tuple[list[bytes], bytes]:
    """Every line the chunks carry, and what is left pending, as the stdout reader frames them."""
    pending = bytearray()
    lines: list[bytes] = []
    for chunk in chunks:
        found, rest = split_lines(pending, chunk, max_line_bytes)
        if found:
            pending.clear()
        lines += found
        pending += chunk[rest:]
    return lines, bytes(pending)


def test_a_chunk_of_whole_lines_splits_at_each_newline_and_leaves_nothing_pending() -> None:
    assert split_lines(b"", b'{"a":1}\n{"b":2}\n', 100) == ([b'{"a":1}', b'{"b":2}'], 16)


def test_a_line_cut_across_chunks_is_joined_whatever_the_cut() -> None:
    data = b'{"jsonrpc":"2.0","id":1}\n\n{"jsonrpc":"2.0","id":2}\n{"partial"'
    for cut in range(len(data) + 1):
        lines, pending = _frame([data[:cut], data[cut:]], 100)
        assert lines == [b'{"jsonrpc":"2.0","id":1}', b"", b'{"jsonrpc":"2.0","id":2}'], cut
        assert pending == b'{"partial"', cut


def test_a_line_at_the_limit_passes_and_one_byte_more_stops_the_split_there() -> None:
    assert split_lines(b"", b"12345\n", 5) == ([b"12345"], 6)
    lines, rest = split_lines(b"", b"ok\n123456\nnext\n", 5)
    assert (lines, rest) == ([b"ok"], 3)  # the rest, from the long line on, is longer than the limit


def test_pending_bytes_count_toward_the_first_lines_limit_only() -> None:
    assert split_lines(b"123", b"456\n12345\n", 5) == ([], 0)
    assert split_lines(b"12", b"345\n12345\n", 5) == ([b"12345", b"12345"], 10)


def test_a_chunk_without_a_newline_is_all_rest() -> None:
    assert split_lines(b"abc", b"def", 5) == ([], 0)
