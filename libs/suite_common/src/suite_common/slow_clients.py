"""Bounds on what a client may hold: the time to send a request's head and body, and the connections.

uvicorn bounds neither: its keep-alive timer runs only *between* requests and any byte received
disarms it, and no ASGI middleware can see a request before its head is complete. So a client that
sends half a request line (or connects and sends nothing) holds a connection and its file
descriptor for ever. ``receive_limited_protocol`` subclasses uvicorn's HTTP protocol instead (the
approach of hyper's ``header_read_timeout``):

- the **head** timer starts when the connection opens, and again when the first byte of a later
  request arrives on a kept-alive connection; it stops once the head is parsed;
- the **body** timer starts there and stops once the whole body is in (a streamed response is never
  cut: both timers stop before the app answers);
- when one fires, the client gets ``408`` with the suite's JSON error body and ``Connection: close``
  (unless a response is already under way: then that response is the connection's last);
- a request that is not valid HTTP gets ``400 invalid_http_request`` in the same JSON shape (uvicorn's
  own answer is plain text);
- past ``max_connections`` open connections, a request is answered ``503`` (JSON, ``Retry-After``,
  ``Connection: close``) without reaching the app; uvicorn's own ``limit_concurrency`` answers in
  plain text and counts requests, not connections.

Per request, this costs one timer per phase and a length check per chunk received.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Literal

from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from suite_common.logging import get_logger

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Default
except ImportError:  # pragma: no cover - the services depend on httptools; h11 is uvicorn's fallback
    _Default = H11Protocol  # type: ignore[assignment, misc]

__all__ = ["ReceiveLimits", "receive_limited_protocol"]

_log = get_logger("suite_common.slow_clients")

Phase = Literal["head", "body"]


@dataclass(frozen=True)
class ReceiveLimits:
    head_timeout_seconds: float
    body_timeout_seconds: float
    max_connections: int
    env_prefix: str = ""
    """The service's settings prefix, so that the error names the setting (``AGENT_REQUEST_HEAD_TIMEOUT_SECONDS``)."""


def _raw_response(status: bytes, code: str, message: str, extra_headers: bytes = b"") -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\nconnection: close\r\n"
        + extra_headers
        + b"\r\n"
        + body
    )


def _over_capacity_app(limits: ReceiveLimits) -> Any:
    body = json.dumps(
        {
            "error": {
                "code": "too_many_connections",
                "message": f"The service has {limits.max_connections} connections open, its limit "
                f"({limits.env_prefix}MAX_CONNECTIONS). Try again shortly.",
            }
        }
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]

    async def over_capacity(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return over_capacity


class _ReceiveLimited(asyncio.Protocol):
    """The timers and the connection limit, mixed in before one of uvicorn's HTTP protocol classes, whose
    attributes (``app``, ``cycle``, ``connections``, ``transport``, ``loop``, ``client``) it uses."""

    _limits: ReceiveLimits
    _refuse: Any
    _timeouts: dict[Phase, float]
    app: Any
    cycle: Any
    connections: set[Any]
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    client: Any

    _receive_timer: asyncio.TimerHandle | None = None
    _receiving: Phase | None = None
    _seen_cycle: Any = None
    _app_for_requests: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._app_for_requests = self.app
        self._arm("head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._receiving is None:
            self._arm("head")  # the first bytes of the next request on a kept-alive connection
        self.app = self._refuse if len(self.connections) > self._limits.max_connections else self._app_for_requests
        super().data_received(data)
        self._advance()

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers a request it cannot parse in plain text; the suite's clients read the JSON error.
        self._disarm()
        cycle = self.cycle
        if cycle is None or not cycle.response_started or cycle.response_complete:
            message = f"The request is not valid HTTP/1.1: {msg}"
            self.transport.write(_raw_response(b"400 Bad Request", "invalid_http_request", message))
        self.transport.close()

    def _arm(self, phase: Phase) -> None:
        self._disarm()
        self._receiving = phase
        self._receive_timer = self.loop.call_later(self._timeouts[phase], self._expired, phase)

    def _disarm(self) -> None:
        if self._receive_timer is not None:
            self._receive_timer.cancel()
            self._receive_timer = None
        self._receiving = None

    def _advance(self) -> None:
        """Move on from the head to the body, and from the body to nothing, as the parser did."""
        cycle = self.cycle
        if self._receiving is not None and cycle is not None and cycle is not self._seen_cycle:
            # A new head is in. From the body phase too: the parser moved past the previous body,
            # which uvicorn no longer marks complete once the app has answered without reading it.
            self._seen_cycle = cycle
            if cycle.more_body:
                self._arm("body")
            else:
                self._disarm()
        elif self._receiving == "body" and not self._seen_cycle.more_body:
            self._disarm()

    def _expired(self, phase: Phase) -> None:
        self._receive_timer = None
        self._advance()  # h11 parses a pipelined head outside data_received
        if self._receiving != phase or self._receive_timer is not None:
            return
        self._receiving = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            cycle.keep_alive = False  # an answer is going out: let it end, then close
            return
        if cycle is not None and not cycle.response_complete:
            # The app waits for the body: it sees the client gone, and whatever it answers is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        what = "head" if phase == "head" else "body"
        seconds = self._timeouts[phase]
        setting = f"{self._limits.env_prefix}REQUEST_{what.upper()}_TIMEOUT_SECONDS"
        _log.info("request_receive_timeout", part=what, seconds=seconds, client=self.client)
        message = f"The request's {what} did not arrive within {seconds:g} s ({setting})."
        self.transport.write(_raw_response(b"408 Request Timeout", "request_timeout", message))
        self.transport.close()


def receive_limited_protocol(limits: ReceiveLimits, base: type[asyncio.Protocol] = _Default) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class ``base`` (httptools, else h11) with ``limits``; pass it as ``Config(http=...)``."""

    class ReceiveLimitedProtocol(_ReceiveLimited, base):  # type: ignore[valid-type, misc]
        _limits = limits
        _refuse = staticmethod(_over_capacity_app(limits))  # the ASGI app itself, not a method
        _timeouts = {"head": limits.head_timeout_seconds, "body": limits.body_timeout_seconds}

    ReceiveLimitedProtocol.__name__ = f"ReceiveLimited{base.__name__}"
    return ReceiveLimitedProtocol
