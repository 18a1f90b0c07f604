"""Server-Sent Events: encoding, and a response whose body is written by a producer coroutine.

Why not a generator-based response (sse-starlette): the agent run is a coroutine that holds
cancel scopes (its deadline, the task group of parallel tool calls). Yielding from inside a
cancel scope in an async generator is unsafe, so the producer instead *pushes* events through
``emit`` while this response owns the connection: it watches for the client going away and
cancels the producer when it does, which in turn cancels every in-flight upstream call.

Kept rather than ``sse-starlette`` (named in the design card's package list, not a dependency of
any package here; checked again in the redesign pass): its ``EventSourceResponse`` takes an async
iterator, which is exactly the generator-across-cancel-scope shape above; we would still need the
producer task, the disconnect watch and the ping timer around it, so it would replace only
``encode_event``. And there it costs more on every event of every stream: encoding a typical
``text`` event (about 80 bytes of JSON, an event name and an id) took 0.8-1.2 us with
``encode_event`` and 3.8-5.6 us with ``sse_starlette.ServerSentEvent(...).encode()`` (3.7.0,
timeit, 200k events, 3 runs on the shared 2-core development machine), and it wants the id as a
string. The same reasoning holds for the other hand-written pieces a library covers, each
documented where it lives: ``sse_parser`` (httpx-sse's four nested generators per line),
``http_client.AiohttpTransport`` (httpx-aiohttp's error mapping), ``peer_client`` (httpx's and
aiohttp's per-request work).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import anyio
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Emit", "EventStreamResponse", "encode_event", "encode_model_event"]

Emit = Callable[[bytes], Awaitable[None]]
"""Sends one already-encoded event (see ``encode_event``) to the client."""

Producer = Callable[[Emit], Awaitable[ASGIApp | None]]
"""Writes the events through ``emit``. With ``defer_start``, a producer that sent nothing may return the
response to answer instead (an error with its own status)."""

PING = b": ping\n\n"


def encode_event(data: str | bytes, *, event: str | None = None, id: int | str | None = None) -> bytes:
    """One SSE frame. Multi-line data becomes several ``data:`` lines, as the spec requires.

    Only ``\r\n``, ``\r`` and ``\n`` end a line in SSE (``str.splitlines`` would also cut at U+2028
    and others, which JSON leaves raw in strings): the client gets back exactly ``data``.
    """
    text = data.decode() if isinstance(data, bytes) else data
    if "\n" in text or "\r" in text:
        text = "\ndata: ".join(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    head = "" if id is None else f"id: {id}\n"
    if event is not None:
        head += f"event: {event}\n"
    return f"{head}data: {text}\n\n".encode()


def encode_model_event(model: BaseModel, event: str) -> bytes:
    """``encode_event(dump(model), event=event)`` (``suite_common.wire.dump``: camelCase, ``None`` left out), the
    same bytes in one step: pydantic's JSON straight into the frame, with no line to split (compact JSON holds no
    raw CR or LF: strings escape them). The per-event path of completion-service's streams."""
    data = model.__pydantic_serializer__.to_json(model, by_alias=True, exclude_none=True)
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


class EventStreamResponse:
    """``text/event-stream`` whose events come from ``producer(emit)``.

    Ends when the producer returns. When the client disconnects, the producer is cancelled.
    A comment line is sent every ``ping_interval`` seconds of silence so that proxies keep
    the connection open during a long tool call.

    ``defer_start``: the status line goes out with the first event, not before; until then the
    producer may still answer otherwise (say, a 429 when its first upstream call is refused),
    and no ping is sent.
    """

    def __init__(
        self,
        producer: Producer,
        *,
        ping_interval: float = 15.0,
        headers: dict[str, str] | None = None,
        defer_start: bool = False,
    ) -> None:
        self.producer = producer
        self.ping_interval = ping_interval
        self.headers = headers or {}
        self.defer_start = defer_start

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        stream = _Stream(send, self._headers(), self.ping_interval, loop)
        if not self.defer_start:
            await stream.start()
        stream.last_sent = loop.time()
        with stream.cancel_scope:
            # A bare asyncio task tied to this scope by the ``finally`` below, not an anyio task group:
            # per stream, the group and its tasks cost several times as much CPU (uvicorn runs on asyncio).
            watcher = loop.create_task(stream.watch_disconnect(receive))
            stream.keep_alive()
            instead: ASGIApp | None = None
            try:
                instead = await self.producer(stream.send_chunk)
            except OSError:
                stream.client_gone = True  # the transport refused a write
            finally:
                watcher.cancel()
                stream.stop_keep_alive()
        if not stream.started and not stream.client_gone and instead is not None:
            await instead(scope, receive, send)
            return
        if not stream.client_gone:
            await stream.end()

    def _headers(self) -> list[tuple[bytes, bytes]]:
        return [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *((k.lower().encode(), v.encode()) for k, v in self.headers.items()),
        ]


class _Stream:
    """One response's state while its producer runs: whether it has started, when it last sent, whether the
    client has gone (cancelling ``cancel_scope``, the producer's)."""

    __slots__ = (
        "_headers",
        "_loop",
        "_ping_interval",
        "_ping_task",
        "_ping_timer",
        "_send",
        "_send_lock",
        "cancel_scope",
        "client_gone",
        "last_sent",
        "started",
    )

    def __init__(
        self, send: Send, headers: list[tuple[bytes, bytes]], ping_interval: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._send = send
        self._headers = headers
        self._ping_interval = ping_interval
        self._loop = loop
        # The producer is not the only sender: the agent loop emits the results of parallel tool calls
        # from their own tasks, and the keep-alive pings come from another. The lock keeps each event
        # whole. asyncio's own (the services run on asyncio): free, it is taken without a trip through the
        # event loop and without anyio's checkpoint, which cost more than the rest of a send.
        self._send_lock = asyncio.Lock()
        self._ping_timer: asyncio.TimerHandle | None = None
        self._ping_task: asyncio.Task[None] | None = None
        self.cancel_scope = anyio.CancelScope()
        self.started = False
        self.client_gone = False
        self.last_sent = 0.0
        """The event loop's time (``anyio.current_time`` on asyncio) of the last write."""

    async def start(self) -> None:
        self.started = True
        await self._send({"type": "http.response.start", "status": 200, "headers": self._headers})

    async def send_chunk(self, chunk: bytes) -> None:
        async with self._send_lock:
            if not self.started:
                await self.start()
            await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
        self.last_sent = self._loop.time()

    async def watch_disconnect(self, receive: Receive) -> None:
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except Exception:  # cannot tell any more: a failed write will say when the client has gone
            return
        self.client_gone = True
        self.cancel_scope.cancel()

    # The keep-alive is a timer, and a task only when a ping is due: most streams end long before one is, and a
    # task per stream that sleeps until it is cancelled cost more than the timer.

    def keep_alive(self) -> None:
        """A ping once ``ping_interval`` has passed without a write (and the response has started: a ping would
        start it)."""
        due = self.last_sent + self._ping_interval if self.started else self._loop.time() + self._ping_interval
        self._ping_timer = self._loop.call_at(due, self._ping_if_silent)

    def _ping_if_silent(self) -> None:
        if self.started and self._loop.time() - self.last_sent >= self._ping_interval:
            self._ping_task = self._loop.create_task(self._ping())
        else:
            self.keep_alive()

    async def _ping(self) -> None:
        try:
            await self.send_chunk(PING)
        except OSError:  # the transport refused a write: the client has gone
            self.client_gone = True
            self.cancel_scope.cancel()
            return
        self.keep_alive()

    def stop_keep_alive(self) -> None:
        if self._ping_timer is not None:
            self._ping_timer.cancel()
        if self._ping_task is not None:
            self._ping_task.cancel()

    async def end(self) -> None:
        with contextlib.suppress(OSError):
            async with self._send_lock:  # after a ping that may still be being written
                if not self.started:
                    await self.start()
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
