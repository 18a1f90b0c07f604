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

Most calls are of that kind (agent-service makes every call of a stored run with a ``callId``), so a call costs about
what a plain JSON call does: the call runs as a bare asyncio task (an anyio task group's ``start_soon`` adds its own
bookkeeping to each), its follower waits on one future (``_Mailbox``) with a timer handle for the ping, not on a memory
object stream inside a cancel scope with a deadline, and a result is kept for its follower by a timer handle, not by
a task waiting for it.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
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


class _Mailbox:
    """One follower's events waiting to be written, bounded: the call puts them, the follower's task takes them.

    Instead of an anyio memory object stream: the one reader waits on one future, woken by the next event or the
    end, and the wait for a first event is bounded by a timer handle, where a memory stream's ``receive`` inside
    ``move_on_after`` costs a cancel scope with its own deadline on every call.
    """

    __slots__ = ("_chunks", "_waiter", "closed")

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._waiter: asyncio.Future[bool] | None = None
        """What the reader awaits while the mailbox is empty: ``True`` once its time is up."""
        self.closed = False

    def put(self, chunk: bytes, *, droppable: bool) -> None:
        """Kept for the reader; dropped once closed, or full (droppable ones earlier, to keep room for questions)."""
        limit = _BUFFER - _KEPT_FOR_QUESTIONS if droppable else _BUFFER
        if self.closed or len(self._chunks) >= limit:
            return
        self._chunks.append(chunk)
        self._wake(False)

    def close(self) -> None:
        """No more events: the reader takes those waiting, then gets ``None``."""
        self.closed = True
        self._wake(False)

    def _wake(self, time_up: bool) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(time_up)

    async def get(self, within: float = math.inf) -> bytes | None:
        """The next event; ``None`` once closed and empty; ``PING`` when none came within ``within`` seconds."""
        while not self._chunks:
            if self.closed:
                return None
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = None if within == math.inf else loop.call_later(within, self._wake, True)
            try:
                time_up = await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
            if time_up:
                return PING
        return self._chunks.popleft()


@dataclass(eq=False)
class Follower:
    """One caller's stream of a call's events (the producer of its ``EventStreamResponse``: ``relay``)."""

    call: LiveCall
    mailbox: _Mailbox = field(default_factory=_Mailbox)

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
    registry: dict[CallKey, LiveCall]
    """``LiveCalls``' calls by key, which this one leaves once its result is taken or no longer kept."""
    result_seconds: float
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: bool = False
    taken: bool = False
    """Set once a follower was sent the last event (or the plain answer)."""
    final: CallEnd = _INTERNAL_ERROR
    question: PendingElicitation | None = None
    _follower: Follower | None = None
    _expiry: asyncio.TimerHandle | None = None
    """When the result of a call that ended, or whose follower left after its end, stops being kept."""

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
        # A follower that lags or has gone misses it: a question is replayed to the next one.
        if self._follower is not None:
            self._follower.mailbox.put(chunk, droppable=droppable)

    def _finished(self) -> None:
        if self.question is not None:
            self.question.settle(ElicitResult(action="cancel"))
        self.done = True
        if self._follower is not None:
            self._follower.mailbox.close()  # its relay ends, sends the last event and frees the callId
        # Kept in every case: should a follower's relay never run to its end, the clock still frees the callId.
        self._keep_result()

    def _keep_result(self) -> None:
        """Its result, nobody following it now, waits ``result_seconds`` for the next follower."""
        if self.key is not None and not self.taken and self._expiry is None:
            self._expiry = asyncio.get_running_loop().call_later(self.result_seconds, self._forget)

    def _take(self) -> None:
        """Its last word was given: it cannot be followed again, and its ``callId`` is free."""
        self.taken = True
        self._forget()

    def _forget(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if self.key is not None and self.registry.get(self.key) is self:
            del self.registry[self.key]

    # --- the follower's side -------------------------------------------------------------------

    def attach(self) -> Follower:
        """A new follower of the call, in place of any other (whose stream then ends without a result)."""
        if self._follower is not None:
            self._follower.mailbox.close()
        follower = Follower(self)
        self._follower = follower
        if self.done:
            follower.mailbox.close()
        elif self.question is not None:
            follower.mailbox.put(_question_event(self.question), droppable=False)
        return follower

    async def _relay(self, follower: Follower, send: Emit, *, answer_plainly: bool = False) -> Response | None:
        mailbox = follower.mailbox
        ended = False
        try:
            if answer_plainly:
                first = await mailbox.get(within=START_WITHIN_SECONDS)
                if first is not None:
                    await send(first)
                elif self._follower is follower and self.done:
                    self._take()
                    ended = True
                    return self.final.response()
            while (chunk := await mailbox.get()) is not None:
                await send(chunk)
            if self._follower is follower and self.done:
                await send(self.final.event())
                self._take()
            ended = True
        finally:
            mailbox.close()
            if not ended and self._follower is follower:
                self._follower = None
                self._left()
        return None

    def _left(self) -> None:
        """Its follower went away while it runs: keep it for an answer to come, or cancel it."""
        if self.done:
            self._keep_result()  # for the next follower
            return
        if self.key is not None and self.question is not None:
            _log.info("mcp_tool_call_detached", call=self.key[1], elicitation=self.question.elicitation_id)
            return
        _log.info("mcp_tool_call_abandoned", reason="the caller disconnected")
        self.scope.cancel()


def _question_event(question: PendingElicitation) -> bytes:
    return encode_event(dump(question.event()), event="elicitation")


class LiveCalls:
    """The SSE calls running now, and those waiting for a follower (by ``(tenant, callId)``)."""

    def __init__(self, broker: ElicitationBroker, *, result_seconds: float) -> None:
        self.broker = broker
        self.result_seconds = result_seconds
        self._calls: dict[CallKey, LiveCall] = {}
        self._running: dict[LiveCall, asyncio.Task[None]] = {}
        """Every call's task while it runs (the loop keeps only weak references to tasks)."""
        self._open = False

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While the calls may run (the app's lifespan): leaving it cancels every call and waits for it to end."""
        self._open = True
        try:
            yield
        finally:
            self._open = False
            for call in self._running:
                call.scope.cancel()
            if self._running:
                with anyio.CancelScope(shield=True):
                    await asyncio.wait(list(self._running.values()))
            for kept in list(self._calls.values()):
                kept._forget()

    def start(self, tenant: str | None, call_id: str | None, work: CallWork) -> Follower:
        """Start a call, followed by its caller; ``CallInProgress`` if ``call_id`` names one running already."""
        assert self._open, "LiveCalls.running() is not entered"
        key = (tenant, call_id) if call_id is not None else None
        call = LiveCall(tenant, key, self.broker, self._calls, self.result_seconds)
        if key is not None:
            previous = self._calls.get(key)
            if previous is not None:
                if not previous.done:
                    raise CallInProgress(call_id)
                previous._forget()  # its result, never taken, gives way to the new call
            self._calls[key] = call
        follower = call.attach()
        # A bare task, in the caller's context (its trace, its log fields; create_task copies it), though not in
        # its task: the call may outlive its caller's request.
        self._running[call] = asyncio.get_running_loop().create_task(self._run(call, work))
        return follower

    def follow(self, tenant: str | None, call_id: str) -> LiveCall | None:
        """The call to follow again; ``None`` if there is none (or its result was taken, or it is another
        tenant's)."""
        call = self._calls.get((tenant, call_id))
        return None if call is None or call.taken else call

    async def _run(self, call: LiveCall, work: CallWork) -> None:
        try:
            with call.scope:
                try:
                    call.final = await work(call.progress, call.ask)
                except Exception:  # the work answers its own failures as events: this is a defect
                    _log.exception("mcp_tool_call_failed_in_gateway")
            if call.scope.cancelled_caught:
                call.final = _CANCELLED
            call._finished()
        finally:
            del self._running[call]
