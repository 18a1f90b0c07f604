"""One keep-alive HTTP/1.1 connection to a sibling service: an asyncio protocol, answers parsed by httptools.

``peer_client.HttptoolsPeerClient`` pools these. A connection carries one exchange at a time: ``send`` writes
the whole request (the suite's requests are small JSON bodies, written to the socket's buffer at once), then
``answer_head`` waits for the status and headers and ``next_body`` hands over the body as it arrives. Reading
pauses while more than ``_MOST_BUFFERED`` bytes wait for a consumer that lags, as uvicorn's own protocol does.

Failures are httpx's exceptions, as ``http_client.raise_translated`` maps aiohttp's: no byte of the answer
before the peer hung up is ``RemoteProtocolError`` (aiohttp's ``ServerDisconnectedError``), a body cut short
``RemoteProtocolError``, a connection reset ``ReadError``, bytes that are not HTTP ``RemoteProtocolError``,
the exchange's deadline ``ReadTimeout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import cast

import httptools
import httpx
from multidict import CIMultiDict

__all__ = ["PeerConnection"]

_MOST_BUFFERED = 64 * 1024
"""Body bytes held for a consumer before reading pauses (aiohttp's and uvicorn's high-water mark)."""

_BODY_FRAMING = (b"content-length", b"transfer-encoding")


class PeerConnection(asyncio.Protocol):
    """A connection made by ``loop.create_connection(PeerConnection, ...)``; ``closed`` once it can carry no
    more exchanges. ``reused`` and ``idle_since`` are the pool's."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self._new_exchange(head_only=False)
        self._in_exchange = False

    def _new_exchange(self, *, head_only: bool) -> None:
        self._in_exchange = True
        self._head_only = head_only
        self.status = 0  # 0 until the final answer's headers have come (an interim 1xx answer is skipped)
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._buffered = 0
        self._complete = False
        self._keep_alive = False
        self._answer_started = False
        self._hung_up_unanswered = False
        self._error: httpx.TransportError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._deadline: asyncio.TimerHandle | None = None

    # The client's side.

    def send(self, request: bytes, *, head_only: bool, deadline: float | None) -> None:
        """Write ``request``; past ``deadline`` (the loop's clock), the exchange fails with ``ReadTimeout``.
        ``head_only``: the answer to a HEAD request, whose headers describe a body that is not sent."""
        assert self._transport is not None, "not connected"
        assert not self._in_exchange, "one exchange at a time"
        self._new_exchange(head_only=head_only)
        if deadline is not None:
            self._deadline = self._loop.call_at(deadline, self._time_out)
        self._transport.write(request)

    @property
    def hung_up_unanswered(self) -> bool:
        """The peer closed or reset the connection before a byte of the answer came (whether it had read the
        request is unknown)."""
        return self._hung_up_unanswered

    async def answer_head(self) -> CIMultiDict[str]:
        """The final answer's headers (``status`` is then set), once they have come."""
        while not self.status:
            await self._wait()
        return CIMultiDict([(name.decode("latin-1"), value.decode("latin-1")) for name, value in self._raw_headers])

    async def next_body(self) -> bytes | None:
        """What has come of the body since the last call (waiting for something), or ``None`` at its end."""
        while not self._body:
            if self._complete:
                return None
            await self._wait()
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        self._buffered = 0
        if self._transport is not None and not self._transport.is_reading() and not self.closed:
            self._transport.resume_reading()
        return body

    def finish(self) -> bool:
        """End the exchange: whether the connection can carry another one (the answer came whole, and the
        peer keeps the connection open)."""
        self._in_exchange = False
        if self._deadline is not None:
            self._deadline.cancel()
        # A body the caller left unread (reading may be paused for it) must not meet the next exchange.
        unread = bool(self._body) or (self._transport is not None and not self._transport.is_reading())
        return self._complete and self._keep_alive and self._error is None and not self.closed and not unread

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: httpx.TransportError) -> None:
        if self._error is None and not self._complete:
            self._error = error
        self.close()
        self._wake()

    def _time_out(self) -> None:
        self._fail(httpx.ReadTimeout("The call's time limit ran out before its answer's end."))

    # asyncio's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is one, without subclassing asyncio's

    def data_received(self, data: bytes) -> None:
        if not self._in_exchange or self._complete:  # bytes nobody asked for: this connection cannot be framed
            self._fail(httpx.RemoteProtocolError("The peer sent bytes outside of an answer."))
            return
        self._answer_started = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(httpx.RemoteProtocolError(f"The peer's answer is not HTTP/1.1: {error}"))
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("The peer switched protocols."))

    def eof_received(self) -> None:
        self.closed = True  # not reused; the transport closes itself next, and connection_lost ends the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._in_exchange and not self._complete:
            self._hung_up_unanswered = not self._answer_started and self._error is None
            if exc is not None:  # a reset: even a body without a length did not end cleanly
                self._fail(httpx.ReadError(str(exc) or type(exc).__name__))
            elif self.status and not self._keep_alive and not self._framed():
                self._complete = True  # a body without a length ends with the connection
            elif not self._answer_started:
                self._fail(httpx.RemoteProtocolError("The peer closed the connection without sending an answer."))
            else:
                self._fail(httpx.RemoteProtocolError("The peer closed the connection before the answer's end."))
        self._wake()

    def _framed(self) -> bool:
        return any(name.lower() in _BODY_FRAMING for name, _ in self._raw_headers)

    # httptools' callbacks.

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._complete:
            raise RuntimeError("a second answer to one request")  # the parser reports it as its error
        status = self._parser.get_status_code()
        if status < 200:
            self._raw_headers = []
            return
        self.status = status
        self._keep_alive = self._parser.should_keep_alive()
        if self._head_only:  # the parser would wait for the body the headers describe: never reused
            self._complete, self._keep_alive = True, False
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered > _MOST_BUFFERED and self._transport is not None and self._transport.is_reading():
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.status:  # not an interim answer's end
            self._complete = True
            self._wake()


def request_bytes(method: str, target: str, host: str, headers: Mapping[str, str], content: bytes | None) -> bytes:
    """The request as written: the caller's headers only, and ``Content-Length`` whenever there is content or
    the method carries some (a POST without a body says 0)."""
    lines = [f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers.items())
    if content is not None or method not in _BODILESS_METHODS:
        lines.append(f"Content-Length: {len(content or b'')}\r\n")
    head = "".join(lines)
    # A CR or LF in a name, value or target would let the caller's data write headers of its own.
    if head.count("\r") != len(lines) + 1 or head.count("\n") != len(lines) + 1 or " " in target:
        raise httpx.LocalProtocolError("A header or the URL holds a line break or a space.")
    return (head + "\r\n").encode() + content if content else (head + "\r\n").encode()


_BODILESS_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS", "TRACE"})
