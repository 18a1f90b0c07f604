"""A server's ``elicitation/create`` (form mode), matched to the tool call in flight that it belongs to.

The gateway declares the ``elicitation`` capability to every server (the SDK ``Client``'s elicitation callback,
``CallElicitations.callback``). A question has no meaning outside the call that made the server ask it: only that
call's caller can put it to a person. So each question is matched to one call of the session:

- the call whose context the callback runs in: the SDK runs the handling of a message in the context of the task
  that sent the request it arrived with (streamable HTTP: the question came on that ``tools/call``'s own response
  stream; at protocol 2026 the question comes inside the call's answer);
- else (stdio, an SSE session, a streamable HTTP server asking on its standalone stream) the one call in flight on
  the session, if there is exactly one.

A question that matches no call, or matches ambiguously (two calls in flight on one stdio session), is declined and
logged.

The second rule trusts that the one call in flight is the one that asks. A call the gateway *abandoned* (its time
limit passed, or its caller cancelled it) may still be running at the server, which may ask later: on a session
shared by tenants (a deployment's stdio server) that question would reach another tenant's call, who would see its
message and whose answer would feed the abandoned call. So once a call was abandoned, a question that the request
context does not relate to a call is declined (and logged why) until the session is *quiet* again: no call in
flight on it for ``QUIET_SECONDS`` — or a new session (the old one's work is gone with it).

A matched call with nobody to ask (a plain JSON ``call-tool``, the gateway's own MCP endpoint) declines at
once. URL mode is declined: the gateway puts form questions to people only.

While a question waits for its answer, the call's time limit stops (``CallClock``): the limit measures the server,
not the person.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import anyio
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT, ElicitRequestFormParams, ElicitRequestParams, ElicitResult, ErrorData

from suite_common.logging import get_logger

__all__ = ["QUIET_SECONDS", "Asker", "CallClock", "CallElicitations"]

_log = get_logger("mcp_client_service.connection.elicitation")

Asker = Callable[[str, ElicitRequestFormParams], Awaitable[ElicitResult]]
"""How a call puts its server's question (``(server, params)``) to a person (the ``call-tool`` SSE caller): the
person's answer, or ``decline``/``cancel`` when there is none to give."""

_DECLINE = ElicitResult(action="decline")

QUIET_SECONDS = 30.0
"""How long a session on which a call was abandoned must have had no call in flight before a question it cannot
relate to a call is again given to the one call in flight: a server's abandoned work rarely asks that late."""


class CallClock:
    """A call's time limit as a budget of seconds, spent only while nobody is being asked a question.

    ``scope`` bounds the call; a question pauses it (several may, on one call), its answer resumes it.
    """

    def __init__(self, seconds: float) -> None:
        self._budget = seconds
        self._pauses = 0
        self.scope = anyio.CancelScope(deadline=anyio.current_time() + seconds)

    def pause(self) -> None:
        if self._pauses == 0:
            self._budget = max(0.0, self.scope.deadline - anyio.current_time())
            self.scope.deadline = math.inf
        self._pauses += 1

    def resume(self) -> None:
        self._pauses -= 1
        if self._pauses == 0:
            self.scope.deadline = anyio.current_time() + self._budget


@dataclass(eq=False)
class _CallInFlight:
    tool: str
    asker: Asker | None
    clock: CallClock | None


_CURRENT: ContextVar[_CallInFlight | None] = ContextVar("mcp_client_call_in_flight", default=None)


@dataclass(eq=False)
class CallElicitations:
    """The calls in flight on one server's session, and the SDK callback that puts their questions to people."""

    server: str
    quiet_seconds: float = QUIET_SECONDS
    _calls: set[_CallInFlight] = field(default_factory=set)
    _abandoned: str | None = None
    """The tool of the last call abandoned while the server may still work on it; ``None`` once quiet."""
    _idle_since: float | None = None
    """``anyio.current_time()`` when the last call in flight ended."""

    @contextmanager
    def call(self, tool: str, asker: Asker | None, clock: CallClock | None) -> Iterator[None]:
        """The block that makes one ``tools/call``: questions that arrive meanwhile may be its own."""
        self._check_quiet()
        entry = _CallInFlight(tool, asker, clock)
        self._calls.add(entry)
        self._idle_since = None
        token = _CURRENT.set(entry)
        try:
            yield
        except BaseException as error:
            if _abandons(error):
                self._abandoned = tool
                _log.info("mcp_call_abandoned_while_server_works", server=self.server, tool=tool)
            raise
        finally:
            _CURRENT.reset(token)
            self._calls.discard(entry)
            if not self._calls:
                self._idle_since = anyio.current_time()

    def new_session(self) -> None:
        """A new session: the work of the old one's abandoned calls ended with it."""
        self._abandoned = None

    def _check_quiet(self) -> None:
        if self._abandoned is None or self._calls or self._idle_since is None:
            return
        if anyio.current_time() - self._idle_since >= self.quiet_seconds:
            self._abandoned = None

    def _match(self) -> _CallInFlight | str:
        """The call a question arriving now belongs to, or why none can be said to."""
        current = _CURRENT.get()
        if current is not None and current in self._calls:
            return current
        if not self._calls:
            return "no tool call is in flight on the session"
        if len(self._calls) > 1:
            return f"{len(self._calls)} tool calls are in flight on the session and the question names none of them"
        self._check_quiet()
        if self._abandoned is not None:
            return (
                f"the question names no call, and a call of {self._abandoned} was abandoned on the session while "
                "the server may still work on it (the question may be that call's)"
            )
        return next(iter(self._calls))

    async def callback(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        """The SDK ``Client``'s elicitation callback."""
        if not isinstance(params, ElicitRequestFormParams):
            _log.info("mcp_elicitation_declined", server=self.server, reason="URL mode is not supported")
            return _DECLINE
        match = self._match()
        if isinstance(match, str):
            _log.warning("mcp_elicitation_declined", server=self.server, reason=match)
            return _DECLINE
        if match.asker is None:
            _log.info("mcp_elicitation_declined", server=self.server, tool=match.tool, reason="nobody to ask")
            return _DECLINE
        if match.clock is not None:
            match.clock.pause()
        try:
            return await match.asker(self.server, params)
        finally:
            if match.clock is not None:
                match.clock.resume()


def _abandons(error: BaseException) -> bool:
    """Whether a call that ended with ``error`` left the server working on it: cancelled (its caller went away, or
    its time limit's scope ran out) or timed out, rather than answered (an error answer, a lost session)."""
    if isinstance(error, anyio.get_cancelled_exc_class() | TimeoutError):
        return True
    return isinstance(error, MCPError) and error.code == REQUEST_TIMEOUT
