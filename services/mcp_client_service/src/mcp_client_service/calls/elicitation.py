"""The questions servers asked during tool calls that wait for a person's answer: the broker.

A call whose caller can ask a person (``call-tool`` as SSE, ``live_calls``) hands its server's question
(``elicitation/create``, form mode) to ``ElicitationBroker.open``: it gets a random ``elicitationId`` and an expiry
(``MCP_CLIENT_ELICITATION_TIMEOUT_SECONDS``), and the caller sees it as an ``elicitation`` event. The answer comes
with ``POST /mcp/v1/elicitations/{elicitationId}`` (``answer``): ``accept`` content has the requested schema's
defaults filled and is checked against it (``suite_common.elicitation.answer_content``, as agent-service checks it).
A question nobody answers in time is answered ``cancel``; so is one whose call ends (its caller cancelled it).

A question answered or expired is remembered a while (by id and tenant only), so that a second answer is told
"already answered" (409) rather than "no such question" (404).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import anyio
from mcp_types import ElicitRequestFormParams, ElicitResult

from suite_common.elicitation import InvalidAnswer, answer_content
from suite_common.logging import get_logger
from suite_common.wire import CallToolElicitation, ElicitationAnswer

__all__ = ["ElicitationAnswered", "ElicitationBroker", "ElicitationNotFound", "InvalidAnswer", "PendingElicitation"]

_log = get_logger("mcp_client_service.calls.elicitation")

_REMEMBERED = 10_000
"""How many settled questions are remembered for a 409 (oldest forgotten first): a bound on memory."""

_CANCEL = ElicitResult(action="cancel")


class ElicitationNotFound(LookupError):
    """No question of this id waits (never was, forgotten, or another tenant's)."""


class ElicitationAnswered(Exception):
    """The question was answered already, or its time ran out (it was answered ``cancel``)."""


@dataclass(eq=False)
class PendingElicitation:
    """One question waiting for its answer."""

    elicitation_id: str
    tenant: str | None
    server: str
    params: ElicitRequestFormParams
    expires_at: datetime
    deadline: float
    """``anyio.current_time()`` of the expiry."""
    result: ElicitResult | None = None
    _settled: anyio.Event = field(default_factory=anyio.Event)

    def settle(self, result: ElicitResult) -> bool:
        """Give the server ``result``; ``False`` if it had its answer already."""
        if self.result is not None:
            return False
        self.result = result
        self._settled.set()
        return True

    def event(self) -> CallToolElicitation:
        """The ``elicitation`` event that puts the question to the caller."""
        return CallToolElicitation(
            elicitation_id=self.elicitation_id,
            message=self.params.message,
            requested_schema=self.params.requested_schema,
            server=self.server,
            expires_at=self.expires_at.isoformat(),
        )


class ElicitationBroker:
    """Every question waiting for a person, by ``elicitationId``."""

    def __init__(self, timeout_seconds: float) -> None:
        self.timeout_seconds = timeout_seconds
        self._pending: dict[str, PendingElicitation] = {}
        self._settled: OrderedDict[str, str | None] = OrderedDict()
        """Recently settled questions: id -> tenant."""

    def open(self, server: str, tenant: str | None, params: ElicitRequestFormParams) -> PendingElicitation:
        """A new question of ``server`` for the caller of a call of ``tenant``, waiting from now."""
        pending = PendingElicitation(
            elicitation_id=secrets.token_urlsafe(16),
            tenant=tenant,
            server=server,
            params=params,
            expires_at=datetime.now(UTC) + timedelta(seconds=self.timeout_seconds),
            deadline=anyio.current_time() + self.timeout_seconds,
        )
        self._pending[pending.elicitation_id] = pending
        _log.info("mcp_elicitation_asked", server=server, tenant=tenant, elicitation=pending.elicitation_id)
        return pending

    async def wait(self, pending: PendingElicitation) -> ElicitResult:
        """The answer to ``pending``: the person's, or ``cancel`` once its time has run out."""
        try:
            with anyio.move_on_after(max(0.0, pending.deadline - anyio.current_time())):
                await pending._settled.wait()
            if pending.settle(_CANCEL):
                _log.info("mcp_elicitation_expired", server=pending.server, elicitation=pending.elicitation_id)
            assert pending.result is not None
            return pending.result
        finally:
            pending.settle(_CANCEL)  # the call ended (cancelled) while it waited
            self._forget(pending)

    def answer(self, elicitation_id: str, tenant: str | None, answer: ElicitationAnswer) -> ElicitResult:
        """Settle a question with a person's answer, as the server gets it.

        Raises ``ElicitationNotFound`` (also for another tenant's question), ``ElicitationAnswered``, and
        ``InvalidAnswer`` for ``accept`` content that does not fit the requested schema (or content without
        ``accept``): the question then still waits.
        """
        pending = self._pending.get(elicitation_id)
        if pending is None or pending.tenant != tenant:
            if elicitation_id in self._settled and self._settled[elicitation_id] == tenant:
                raise ElicitationAnswered(elicitation_id)
            raise ElicitationNotFound(elicitation_id)
        if pending.result is not None:
            raise ElicitationAnswered(elicitation_id)
        if answer.action == "accept":
            content = answer_content(pending.params.requested_schema, answer.content)
            result = ElicitResult(action="accept", content=content)
        elif answer.content:
            raise InvalidAnswer(f"content goes only with accept, not with {answer.action}")
        else:
            result = ElicitResult(action=answer.action)
        pending.settle(result)
        _log.info("mcp_elicitation_answered", server=pending.server, elicitation=elicitation_id, action=answer.action)
        return result

    def _forget(self, pending: PendingElicitation) -> None:
        if self._pending.pop(pending.elicitation_id, None) is None:
            return
        self._settled[pending.elicitation_id] = pending.tenant
        while len(self._settled) > _REMEMBERED:
            self._settled.popitem(last=False)
