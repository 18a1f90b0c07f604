"""Questions tool servers ask during a run (table ``inputs``, MCP elicitation relayed by the gateway): stored when
asked (before their ``input_required`` event, so that an answer to it always finds them), answered by a caller or
declined when their wait runs out (the wait itself, shared with approvals: ``_waiting``).

A question may be answered as soon as its ``input_required`` is told, while the round's other calls still run: the
answer is kept, and its ``input_decided`` event is appended when the run parks (the run's owner numbers its events
until then); a park that leaves nothing pending claims the run again at once. Once the run waits, the answer that
leaves nothing of the round pending claims the run for the answering replica, which resumes it: it forwards each
answer to the gateway and follows the call to its result. An accepted answer's content is kept for that
(``answer``), never shown, and cleared once the gateway took it (``forget_answer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.core.run import AskedInput
from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.store._rows import read_run, utc_now
from agent_service.store._wait_rows import locked_run, settle
from agent_service.store.records import ACTIVE_STATUSES, InputNotPending, InputRecord, LeaseLost, RunRecord
from agent_service.store.schema import inputs, run_events
from suite_common.sql import Database
from suite_common.wire import ElicitationAction, InputStatus, RunInputDecided, dump

__all__ = [
    "Answered",
    "InputDecision",
    "RunInputs",
    "announce_early_answers",
    "answer_inputs",
    "ask_inputs",
    "close_unparked",
]

_STATUS: dict[ElicitationAction, InputStatus] = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}


@dataclass(frozen=True, slots=True)
class InputDecision:
    """An answer to a question: ``content`` with ``accept`` only, already checked against its schema."""

    input_id: str
    action: ElicitationAction
    content: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Answered:
    """What an answer left: the run (claimed by the answerer when nothing of its round waits any more: ``resumed``)
    and its questions."""

    record: RunRecord
    inputs: list[InputRecord]
    resumed: bool


def _input(row: Any) -> InputRecord:
    return InputRecord(
        run_id=row.run_id,
        input_id=row.input_id,
        tool_call_id=row.tool_call_id,
        iteration=row.iteration,
        name=row.name,
        server=row.server,
        message=row.message,
        requested_schema=row.requested_schema,
        status=row.status,
        answer=row.answer,
        decided_by=row.decided_by,
        requested_at=row.requested_at,
        decided_at=row.decided_at,
        expires_at=row.expires_at,
    )


def _inputs_of(connection: Connection, run_id: str) -> list[InputRecord]:
    # The pending ones first (what a person has to answer), then by round and request.
    pending_first = sa.case((inputs.c.status == "pending", 0), else_=1)
    query = (
        sa.select(inputs)
        .where(inputs.c.run_id == run_id)
        .order_by(pending_first, inputs.c.iteration, inputs.c.requested_at, inputs.c.input_id)
    )
    return [_input(row) for row in connection.execute(query)]


def ask_inputs(connection: Connection, run_id: str, tenant: str, asked: Sequence[AskedInput], now: datetime) -> None:
    """``asked`` stored as pending questions of the run (those not stored yet: each is stored when asked, and again
    offered when its run parks)."""
    if asked:
        known = set(
            connection.execute(
                sa.select(inputs.c.input_id).where(
                    inputs.c.run_id == run_id, inputs.c.input_id.in_([question.input_id for question in asked])
                )
            ).scalars()
        )
        asked = [question for question in asked if question.input_id not in known]
    if not asked:
        return
    connection.execute(
        inputs.insert(),
        [
            {
                "run_id": run_id,
                "input_id": question.input_id,
                "tenant": tenant,
                "tool_call_id": question.tool_call_id,
                "iteration": question.iteration,
                "name": question.name,
                "server": question.server,
                "message": question.message,
                "requested_schema": question.requested_schema,
                "status": "pending",
                "requested_at": now,
                "expires_at": question.expires_at,
            }
            for question in asked
        ],
    )


def _decide(connection: Connection, run_id: str, answer: InputDecision, decided_by: str | None, now: datetime) -> str:
    """One pending question's answer recorded; its call's id. ``InputNotPending`` for one that is not pending."""
    tool_call_id = connection.execute(
        sa.select(inputs.c.tool_call_id).where(
            inputs.c.run_id == run_id, inputs.c.input_id == answer.input_id, inputs.c.status == "pending"
        )
    ).scalar_one_or_none()
    if tool_call_id is None:
        raise InputNotPending(run_id, answer.input_id)
    connection.execute(
        inputs.update()
        .where(inputs.c.run_id == run_id, inputs.c.input_id == answer.input_id)
        .values(
            status=_STATUS[answer.action],
            answer=answer.content if answer.action == "accept" else None,
            decided_by=decided_by,
            decided_at=now,
        )
    )
    return str(tool_call_id)


def _decided_event(
    run_id: str, seq: int, input_id: str, tool_call_id: str, action: ElicitationAction, by: str | None
) -> dict[str, Any]:
    event = RunInputDecided(run_id=run_id, input_id=input_id, tool_call_id=tool_call_id, action=action, decided_by=by)
    return {"run_id": run_id, "seq": seq, "type": event.type, "data": dump(event)}


def answer_inputs(
    connection: Connection, run_id: str, answers: Sequence[InputDecision], decided_by: str | None, now: datetime
) -> int:
    """Record ``answers`` of pending questions, each with its ``input_decided`` event; the run's new ``last_seq``.
    Raises ``InputNotPending`` (the transaction rolled back: nothing kept) for one that is not pending."""
    row = locked_run(connection, run_id)
    last_seq = row.last_seq
    events = []
    for answer in answers:
        tool_call_id = _decide(connection, run_id, answer, decided_by, now)
        last_seq += 1
        events.append(_decided_event(run_id, last_seq, answer.input_id, tool_call_id, answer.action, decided_by))
    if events:
        connection.execute(run_events.insert(), events)
    return int(last_seq)


def announce_early_answers(connection: Connection, run_id: str, asked: Sequence[AskedInput], last_seq: int) -> int:
    """The run parks with ``asked``: those answered before (while the round's other calls ran, with no event then)
    get their ``input_decided`` events now, numbered on from ``last_seq``; the run's new ``last_seq``."""
    if not asked:
        return last_seq
    answered = connection.execute(
        sa.select(inputs.c.input_id, inputs.c.tool_call_id, inputs.c.status, inputs.c.decided_by)
        .where(
            inputs.c.run_id == run_id,
            inputs.c.input_id.in_([question.input_id for question in asked]),
            inputs.c.status != "pending",
        )
        .order_by(inputs.c.decided_at, inputs.c.input_id)
    ).all()
    actions = {status: action for action, status in _STATUS.items()}
    events = []
    for row in answered:
        last_seq += 1
        events.append(
            _decided_event(run_id, last_seq, row.input_id, row.tool_call_id, actions[row.status], row.decided_by)
        )
    if events:
        connection.execute(run_events.insert(), events)
    return last_seq


def close_unparked(connection: Connection, run_ids: Sequence[str], now: datetime) -> None:
    """The questions still pending of runs whose round ended without parking (ended, or taken over after a crash):
    ``cancelled``, as nobody will forward an answer to them (a takeover tells the gateway ``cancel``)."""
    if run_ids:
        connection.execute(
            inputs.update()
            .where(inputs.c.run_id.in_(list(run_ids)), inputs.c.status == "pending")
            .values(status="cancelled", decided_at=now)
        )


class RunInputs:
    """The questions part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def answer(
        self, run_id: str, answers: Sequence[InputDecision], *, decided_by: str, owner: str, lease_seconds: float
    ) -> Answered:
        """Record ``answers`` (each of a question still pending, else ``InputNotPending`` and nothing kept).

        Of a run that waits: with their ``input_decided`` events; when nothing of the run waits any more (its
        approvals decided too), the run is claimed for ``owner`` (status ``tool_loop``, leased). Of a run whose round
        still runs (it asked, and has not parked yet): kept only, the run's owner appends the events as it parks
        (``announce_early_answers``) — it numbers the run's events until then."""

        def answer(connection: Connection) -> Answered:
            now = utc_now()
            row = locked_run(connection, run_id)
            resumed = False
            if row is not None and row.status in ACTIVE_STATUSES and row.lease_owner is not None:
                for decision in answers:
                    _decide(connection, run_id, decision, decided_by, now)
            # A run whose wait ran out and that the sweep claimed (it has an owner) takes no answer any more.
            elif row is None or row.status != "waiting" or row.lease_owner is not None:
                raise InputNotPending(run_id, answers[0].input_id)
            else:
                last_seq = answer_inputs(connection, run_id, answers, decided_by, now)
                resumed = settle(
                    connection, run_id, last_seq=last_seq, owner=owner, lease_seconds=lease_seconds, now=now
                )
            record = read_run(connection, run_id)
            assert record is not None
            return Answered(record, _inputs_of(connection, run_id), resumed)

        return await self._db.run(f"answer inputs of run {run_id}", answer, write=True)

    async def ask(self, run_id: str, question: AskedInput, *, owner: str) -> None:
        """A question of the run's round stored as pending as it is asked (its run not parked yet), so that an answer
        given as soon as its ``input_required`` is told finds it. Raises ``LeaseLost`` when ``owner`` no longer
        holds the run (nothing written)."""

        def ask(connection: Connection) -> None:
            row = locked_run(connection, run_id)
            if row is None or row.lease_owner != owner or row.status not in ACTIVE_STATUSES:
                raise LeaseLost(f"Run {run_id} is no longer held by {owner}.")
            ask_inputs(connection, run_id, row.tenant or DEFAULT_TENANT, [question], utc_now())

        await self._db.run(f"store a question of run {run_id}", ask, write=True)

    async def close_inputs(self, run_id: str) -> None:
        """The run ended: any question of it still pending is ``cancelled`` (``close_unparked``)."""
        await self._db.run(
            f"close the inputs of run {run_id}",
            lambda connection: close_unparked(connection, [run_id], utc_now()),
            write=True,
        )

    async def forget_answer(self, run_id: str, input_id: str) -> None:
        """An accepted answer's content cleared: the gateway took it (the call it waited for has moved on), so it is
        not kept in the store any longer than the resume needed it."""
        await self._db.run(
            f"forget the answer to an input of run {run_id}",
            lambda connection: connection.execute(
                inputs.update()
                .where(inputs.c.run_id == run_id, inputs.c.input_id == input_id)
                .values(answer=sa.null())  # SQL NULL, not JSON null: nothing of it is left
            ),
            write=True,
        )

    async def inputs(self, run_id: str) -> list[InputRecord]:
        """The run's questions, the pending ones first."""
        return await self._db.run(
            f"read the inputs of run {run_id}", lambda connection: _inputs_of(connection, run_id), write=False
        )
