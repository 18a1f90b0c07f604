"""``call-tool`` as SSE: calls that run apart from their caller's connection, so they can wait for a person.

Every SSE call runs as a ``LiveCall`` in the gateway's own task group and is *followed* by its caller's stream:
progress, the server's questions (``elicitation`` events, ``calls.elicitation``), then one ``result`` or ``error``.
A caller that goes away cancels its call, as a plain call-tool's does (the server is told to stop) — except when
the call was made with a ``callId`` and a question of it waits for an answer: then the call is kept (*detached*),
for its caller to answer the question (``POST /mcp/v1/elicitations/{id}``) and follow it again
(``GET /mcp/v1/calls/{callId}/events``): the question still waiting first, then the call's progress, then its
result. A detached call lives until it ends (its question unanswered in time is answered ``cancel``, and the
server goes on); its result waits ``MCP_CLIENT_DETACHED_RESULT_SECONDS`` for one follower.

Events go to the follower through a small buffer, so that a slow or vanished follower never holds a call up:
progress beyond it is dropped; a question is kept on the call and replayed to whoever follows next.

A call that ends before it had anything else to send (no progress, no question) is answered to the caller that
started it as the plain JSON call-tool would be (``CallEnd.response``: its status, body and headers), not as an
event stream: the stream costs both ends CPU for nothing then. Its stream starts with its first event otherwise
(or a ping after ``START_WITHIN_SECONDS`` of silence, so that proxies keep a long silent call's connection).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp_types import ElicitRequestFormParams, ElicitResult
from starlette.responses import Response

from mcp_client_service.calls.elicitation import ElicitationBroker, PendingElicitation
from mcp_client_service.connection.elicitation import Asker
from suite_common.logging import get_logger
from suite_common.sse import PING, Emit, encode_event
from suite_common.wire import dump

__all__ = ["START_WITHIN_SECONDS", "CallEnd", "CallInProgress", "CallWork", "Follower", "LiveCall", "LiveCalls"]

_log = get_logger("mcp_client_service.calls.live_calls")


@dataclass(frozen=True, slots=True)
class CallEnd:
    """A call's last word, in both of its forms: the SSE ``result`` or ``error`` event (``data``, the JSON of the
    result or of the error's ``{code, message, ...}``), and the plain JSON answer of call-tool (``response``)."""

    kind: str
    """``result`` or ``error``."""
    data: str
    status: int = 200
    """The plain answer's status (an error's: as the JSON call-tool answers it)."""
    headers: Mapping[str, str] | None = None
    """The plain answer's headers (``Retry-After`` of a 503)."""

    def event(self) -> bytes:
        return encode_event(self.data, event=self.kind)

    def response(self) -> Response:
        body = self.data if self.kind == "result" else '{"error":' + self.data + "}"
        return Response(body, self.status, self.headers, media_type="application/json")


CallWork = Callable[[Emit, Asker], Awaitable[CallEnd]]
"""The call itself: it sends its progress events through the ``Emit``, puts its server's questions to a person
through the ``Asker``, and returns its last word (``result`` or ``error``)."""

START_WITHIN_SECONDS = 15.0
"""A streamed call silent this long starts its stream with a ping (``EventStreamResponse``'s ping interval): from
then on its end is a ``result`` or ``error`` event, no longer a plain JSON answer."""

_BUFFER = 64
"""Events waiting for a follower to write them; progress is dropped past ``_BUFFER - _KEPT_FOR_QUESTIONS``."""
_KEPT_FOR_QUESTIONS = 8

_INTERNAL_ERROR = CallEnd(
    "error",
    json.dumps({"code": "internal_error", "message": "The gateway failed while making the call; see its log."}),
    500,
)

_CANCELLED = CallEnd(
    "error",
    json.dumps(
        {"code": "call_cancelled", "message": "The call was cancelled: its caller went away, or the gateway stopped."}
    ),
    503,
)

CallKey = tuple[str | None, str]
"""``(tenant, callId)``: a call is followed again only with its own tenant's ``X-Tenant-Id``."""


class CallInProgress(Exception):
    """A call with this ``callId`` (of this tenant) is running already."""


@dataclass(eq=False)
class Follower:
    """One caller's stream of a call's events (the producer of its ``EventStreamResponse``: ``relay``)."""

    call: LiveCall
    out: MemoryObjectSendStream[bytes]
    inbox: MemoryObjectReceiveStream[bytes]

    async def relay(self, send: Emit) -> None:
        """Write the call's events through ``send`` until its last one; cancelled when the caller goes away, which
        cancels or detaches the call."""
        await self.call._relay(self, send)

    async def relay_or_answer(self, send: Emit) -> Response | None:
        """``relay``, for an ``EventStreamResponse`` with ``defer_start``: a call that ends before any event is
        answered as plain JSON instead (the response returned)."""
        return await self.call._relay(self, send, answer_plainly=True)


@dataclass(eq=False)
class LiveCall:
    """One SSE call: the task that makes it, its question waiting for an answer, its follower, its last event."""

    tenant: str | None
    """The caller's ``X-Tenant-Id``: its questions are answered with it, with or without a ``callId``."""
    key: CallKey | None
    """``None`` for a call made without ``callId``: nobody can follow it again."""
    broker: ElicitationBroker
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    taken: anyio.Event = field(default_factory=anyio.Event)
    """Set once a follower was sent the last event."""
    final: CallEnd = _INTERNAL_ERROR
    question: PendingElicitation | None = None
    _follower: Follower | None = None

    # --- the call's side ------------------------------------------------------------------------

    async def progress(self, chunk: bytes) -> None:
        """The call's ``progress`` event, for whoever follows now (dropped if nobody does, or they lag)."""
        self._deliver(chunk, droppable=True)

    async def ask(self, server: str, params: ElicitRequestFormParams) -> ElicitResult:
        """The call's ``Asker``: the question to the follower (now, or whoever follows next), then its answer."""
        question = self.broker.open(server, self.tenant, params)
        self.question = question
        self._deliver(_question_event(question), droppable=False)
        try:
            return await self.broker.wait(question)
        finally:
            if self.question is question:
                self.question = None

    def _deliver(self, chunk: bytes, *, droppable: bool) -> None:
        follower = self._follower
        if follower is None:
            return
        if droppable and follower.out.statistics().current_buffer_used >= _BUFFER - _KEPT_FOR_QUESTIONS:
            return
        # A follower that lags or has gone misses it: a question is replayed to the next one.
        with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            follower.out.send_nowait(chunk)

    def _finished(self) -> None:
        if self.question is not None:
            self.question.settle(ElicitResult(action="cancel"))
        self.done.set()
        if self._follower is not None:
            self._follower.out.close()  # its relay ends and sends the last event

    # --- the follower's side -------------------------------------------------------------------

    def attach(self) -> Follower:
        """A new follower of the call, in place of any other (whose stream then ends without a result)."""
        out, inbox = anyio.create_memory_object_stream[bytes](_BUFFER)
        if self._follower is not None:
            self._follower.out.close()
        follower = Follower(self, out, inbox)
        self._follower = follower
        if self.done.is_set():
            out.close()
        elif self.question is not None:
            out.send_nowait(_question_event(self.question))
        return follower

    async def _relay(self, follower: Follower, send: Emit, *, answer_plainly: bool = False) -> Response | None:
        ended = False
        try:
            async with follower.inbox:
                if answer_plainly:
                    first = await _first_chunk(follower.inbox)
                    if first is not None:
                        await send(first)
                    elif self._follower is follower and self.done.is_set():
                        self.taken.set()
                        ended = True
                        return self.final.response()
                async for chunk in follower.inbox:
                    await send(chunk)
            if self._follower is follower and self.done.is_set():
                await send(self.final.event())
                self.taken.set()
            ended = True
        finally:
            follower.out.close()
            if not ended and self._follower is follower:
                self._follower = None
                self._left()
        return None

    def _left(self) -> None:
        """Its follower went away while it runs: keep it for an answer to come, or cancel it."""
        if self.done.is_set():
            return  # its last event is kept for the next follower
        if self.key is not None and self.question is not None:
            _log.info("mcp_tool_call_detached", call=self.key[1], elicitation=self.question.elicitation_id)
            return
        _log.info("mcp_tool_call_abandoned", reason="the caller disconnected")
        self.scope.cancel()


async def _first_chunk(inbox: MemoryObjectReceiveStream[bytes]) -> bytes | None:
    """The first event for the follower; a ping after ``START_WITHIN_SECONDS`` of silence; ``None`` when its stream
    ended before either (the call ended, or another follower took its place)."""
    with anyio.move_on_after(START_WITHIN_SECONDS):
        try:
            return await inbox.receive()
        except anyio.EndOfStream:
            return None
    return PING


def _question_event(question: PendingElicitation) -> bytes:
    return encode_event(dump(question.event()), event="elicitation")


class LiveCalls:
    """The SSE calls running now, and those waiting for a follower (by ``(tenant, callId)``)."""

    def __init__(self, broker: ElicitationBroker, *, result_seconds: float) -> None:
        self.broker = broker
        self.result_seconds = result_seconds
        self._calls: dict[CallKey, LiveCall] = {}
        self._group: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The task group the calls run in (the app's lifespan): leaving it cancels every call."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()

    def start(self, tenant: str | None, call_id: str | None, work: CallWork) -> Follower:
        """Start a call, followed by its caller; ``CallInProgress`` if ``call_id`` names one running already."""
        assert self._group is not None, "LiveCalls.running() is not entered"
        key = (tenant, call_id) if call_id is not None else None
        if key is not None:
            running = self._calls.get(key)
            if running is not None and not running.done.is_set():
                raise CallInProgress(call_id)
        call = LiveCall(tenant=tenant, key=key, broker=self.broker)
        if key is not None:
            self._calls[key] = call
        follower = call.attach()
        # The call runs in the caller's context (its trace, its log fields), though not in its task.
        contextvars.copy_context().run(self._group.start_soon, self._run, call, work)
        return follower

    def follow(self, tenant: str | None, call_id: str) -> LiveCall | None:
        """The call to follow again; ``None`` if there is none (or its result was taken, or it is another
        tenant's)."""
        call = self._calls.get((tenant, call_id))
        return None if call is None or call.taken.is_set() else call

    async def _run(self, call: LiveCall, work: CallWork) -> None:
        with call.scope:
            try:
                call.final = await work(call.progress, call.ask)
            except Exception:  # the work answers its own failures as events: this is a defect
                _log.exception("mcp_tool_call_failed_in_gateway")
        if call.scope.cancelled_caught:
            call.final = _CANCELLED
        call._finished()
        if call.key is None:
            return
        # Kept for one follower: the one following now, or the next within the time limit.
        with anyio.move_on_after(self.result_seconds):
            await call.taken.wait()
        if self._calls.get(call.key) is call:
            del self._calls[call.key]
