"""A cap on how much of one HTTP response of an MCP server the gateway holds in memory.

A JSON answer (``application/json``) is read whole before the SDK parses it, so a server that
answers a ``tools/call`` with 80 MB would cost the gateway 80 MB, and several times that parsed.
``limit_response`` wraps such a body in a stream that counts its bytes as they arrive and fails
the read past the limit with ``ResponseTooLarge``, an ``httpx2.StreamError``: the SDK then fails
that one request with a JSON-RPC parse error that quotes it, and the session carries on.

An event stream (``text/event-stream``) is not counted as a whole: it may stay open for the
whole session. Each of its events is bounded instead, by the SDK's ``max_sse_event_size`` (given
the same limit). A compressed body is not decompressed (the gateway asks for ``identity``): its
size after decompression could not be bounded while it is read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

__all__ = ["ResponseTooLarge", "is_oversized_answer", "limit_response"]

_TOO_LARGE = "is larger than the gateway accepts"
_SSE_EVENT_TOO_LARGE = "Server-sent event exceeded the"
"""How httpx2 words an event beyond ``max_event_size`` (the SDK quotes it in the error it sends)."""


class ResponseTooLarge(httpx2.StreamError):
    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            f"the server's answer {_TOO_LARGE}: more than {max_bytes} bytes (MCP_CLIENT_HTTP_MAX_RESPONSE_BYTES)"
        )


def is_oversized_answer(message: str) -> bool:
    """Whether an error message says that an answer was dropped for its size (a body, or one SSE event)."""
    return _TOO_LARGE in message or _SSE_EVENT_TOO_LARGE in message


class _CountedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, max_bytes: int, declared: int | None) -> None:
        self._inner = inner
        self._max_bytes = max_bytes
        self._declared = declared

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared is not None and self._declared > self._max_bytes:
            raise ResponseTooLarge(self._max_bytes)  # said so up front: not a byte of it is read
        received = 0
        async for chunk in self._inner:
            received += len(chunk)
            if received > self._max_bytes:
                raise ResponseTooLarge(self._max_bytes)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def _declared_length(response: httpx2.Response) -> int | None:
    try:
        return int(response.headers["content-length"])
    except (KeyError, ValueError):
        return None


def limit_response(response: httpx2.Response, max_bytes: int) -> httpx2.Response:
    """``response`` whose body, unless it is an event stream, fails to read past ``max_bytes``."""
    content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if content_type == "text/event-stream":
        return response
    if response.headers.get("content-encoding", "identity").strip().lower() != "identity":
        # Asked for identity and sent something else: left as it is (not decompressed), the body
        # fails to parse, with a clear error, instead of inflating past every bound.
        del response.headers["content-encoding"]
    stream = response.stream
    assert isinstance(stream, httpx2.AsyncByteStream)
    response.stream = _CountedBody(stream, max_bytes, _declared_length(response))
    return response
