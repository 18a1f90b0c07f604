"""Questions tool servers ask during a run (table ``inputs``, MCP elicitation relayed by the gateway): stored as their
run parks, answered by a caller or declined when their wait runs out (the wait itself, shared with approvals:
``_waiting``).

The answer that leaves nothing of the round pending claims the run for the answering replica, which resumes it: it
forwards each answer to the gateway and follows the call to its result. An accepted answer's content is kept for
that (``answer``), never shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.core.run import AskedInput
from agent_service.store._rows import read_run, utc_now
from agent_service.store._wait_rows import locked_run, settle
from agent_service.store.records import InputNotPending, InputRecord, RunRecord
from agent_service.store.schema import inputs, run_events
from suite_common.sql import Database
from suite_common.wire import ElicitationAction, InputStatus, RunInputDecided, dump

__all__ = ["Answered", "InputDecision", "RunInputs", "answer_inputs", "ask_inputs"]

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
    """``asked`` stored as pending questions of the run that parks."""
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


def answer_inputs(
    connection: Connection, run_id: str, answers: Sequence[InputDecision], decided_by: str | None, now: datetime
) -> int:
    """Record ``answers`` of pending questions, each with its ``input_decided`` event; the run's new ``last_seq``.
    Raises ``InputNotPending`` (the transaction rolled back: nothing kept) for one that is not pending."""
    row = locked_run(connection, run_id)
    last_seq = row.last_seq
    events = []
    for answer in answers:
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
        last_seq += 1
        event = RunInputDecided(
            run_id=run_id,
            input_id=answer.input_id,
            tool_call_id=tool_call_id,
            action=answer.action,
            decided_by=decided_by,
        )
        events.append({"run_id": run_id, "seq": last_seq, "type": event.type, "data": dump(event)})
    if events:
        connection.execute(run_events.insert(), events)
    return int(last_seq)


class RunInputs:
    """The questions part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def answer(
        self, run_id: str, answers: Sequence[InputDecision], *, decided_by: str, owner: str, lease_seconds: float
    ) -> Answered:
        """Record ``answers`` (each of a question still pending of a run still waiting, else ``InputNotPending`` and
        nothing kept) with their ``input_decided`` events; when nothing of the run waits any more (its approvals
        decided too), the run is claimed for ``owner`` (status ``tool_loop``, leased)."""

        def answer(connection: Connection) -> Answered:
            now = utc_now()
            row = locked_run(connection, run_id)
            # A run whose wait ran out and that the sweep claimed (it has an owner) takes no answer any more.
            if row is None or row.status != "waiting" or row.lease_owner is not None:
                raise InputNotPending(run_id, answers[0].input_id)
            last_seq = answer_inputs(connection, run_id, answers, decided_by, now)
            resumed = settle(connection, run_id, last_seq=last_seq, owner=owner, lease_seconds=lease_seconds, now=now)
            record = read_run(connection, run_id)
            assert record is not None
            return Answered(record, _inputs_of(connection, run_id), resumed)

        return await self._db.run(f"answer inputs of run {run_id}", answer, write=True)

    async def inputs(self, run_id: str) -> list[InputRecord]:
        """The run's questions, the pending ones first."""
        return await self._db.run(
            f"read the inputs of run {run_id}", lambda connection: _inputs_of(connection, run_id), write=False
        )
