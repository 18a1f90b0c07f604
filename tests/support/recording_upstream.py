"""A raw ASGI app for tests of HTTP clients: it records what it was sent and answers as each path says.

``/events``: an event stream whose second event waits for ``release``; ``/hold``: a body that never
ends, noting the client's disconnect; ``/slow``: waits for ``release``, counting requests in flight;
any other path: 201 with a JSON body, an ``x-upstream`` header and a cookie.
"""

from __future__ import annotations

import anyio
from starlette.types import Message, Receive, Scope, Send

__all__ = ["RecordingUpstream", "answer"]


class RecordingUpstream:
    """A raw ASGI app: records what it was sent, and answers as each path says."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, list[tuple[bytes, bytes]], bytes]] = []
        self.clients: list[tuple[str, int]] = []
        self.release = anyio.Event()
        self.first_event_sent = anyio.Event()
        self.disconnected = anyio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.two_in_flight = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.requests.append((scope["path"], list(scope["headers"]), body))
        self.clients.append(scope["client"])
        path = scope["path"]
        if path == "/events":
            await self._events(send)
        elif path == "/hold":
            await self._hold(receive, send)
        elif path == "/slow":
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            if self.in_flight == 2:
                self.two_in_flight.set()
            await self.release.wait()
            self.in_flight -= 1
            await answer(send, 200, b"done")
        else:
            await answer(send, 201, b'{"echo": true}', [(b"x-upstream", b"yes"), (b"set-cookie", b"session=abc")])

    async def _events(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
        self.first_event_sent.set()
        await self.release.wait()
        await send({"type": "http.response.body", "body": b"data: two\n\n"})

    async def _hold(self, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        message: Message = await receive()  # only http.disconnect can come now
        if message["type"] == "http.disconnect":
            self.disconnected.set()


async def answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers or []})
    await send({"type": "http.response.body", "body": body})
