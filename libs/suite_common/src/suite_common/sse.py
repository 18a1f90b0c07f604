"""Server-Sent Events: encoding, and a response whose body is written by a producer coroutine.

Why not a generator-based response (sse-starlette): the agent run is a coroutine that holds
cancel scopes (its deadline, the task group of parallel tool calls). Yielding from inside a
cancel scope in an async generator is unsafe, so the producer instead *pushes* events through
``emit`` while this response owns the connection: it watches for the client going away and
cancels the producer when it does, which in turn cancels every in-flight upstream call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import anyio
from starlette.types import Message, Receive, Scope, Send

__all__ = ["Emit", "EventStreamResponse", "encode_event"]

Emit = Callable[[bytes], Awaitable[None]]
"""Sends one already-encoded event (see ``encode_event``) to the client."""

Producer = Callable[[Emit], Awaitable[None]]

PING = b": ping\n\n"


def encode_event(data: str | bytes, *, event: str | None = None, id: int | str | None = None) -> bytes:
    """One SSE frame. Multi-line data becomes several ``data:`` lines, as the spec requires."""
    text = data.decode() if isinstance(data, bytes) else data
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.extend(f"data: {line}" for line in text.splitlines() or [""])
    return ("\n".join(lines) + "\n\n").encode()


class EventStreamResponse:
    """``text/event-stream`` whose events come from ``producer(emit)``.

    Ends when the producer returns. When the client disconnects, the producer is cancelled.
    A comment line is sent every ``ping_interval`` seconds of silence so that proxies keep
    the connection open during a long tool call.
    """

    def __init__(
        self, producer: Producer, *, ping_interval: float = 15.0, headers: dict[str, str] | None = None
    ) -> None:
        self.producer = producer
        self.ping_interval = ping_interval
        self.headers = headers or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *((k.lower().encode(), v.encode()) for k, v in self.headers.items()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        send_lock = anyio.Lock()
        last_sent = anyio.current_time()

        async def send_chunk(chunk: bytes) -> None:
            nonlocal last_sent
            async with send_lock:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                last_sent = anyio.current_time()

        client_gone = False

        async def watch_disconnect(cancel: anyio.CancelScope) -> None:
            nonlocal client_gone
            while True:
                message: Message = await receive()
                if message["type"] == "http.disconnect":
                    client_gone = True
                    cancel.cancel()
                    return

        async def keep_alive() -> None:
            while True:
                await anyio.sleep(max(0.0, last_sent + self.ping_interval - anyio.current_time()))
                if anyio.current_time() - last_sent >= self.ping_interval:
                    await send_chunk(PING)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_disconnect, tg.cancel_scope)
            tg.start_soon(keep_alive)
            try:
                await self.producer(send_chunk)
            except OSError:
                client_gone = True  # the transport refused a write
            tg.cancel_scope.cancel()
        if not client_gone:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
