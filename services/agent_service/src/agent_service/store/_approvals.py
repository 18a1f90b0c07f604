"""Tool calls that wait for a person's approval (table ``approvals``): held as their run parks, decided by a caller
or denied when their wait runs out (the wait itself, shared with questions: ``_waiting``).

A decision claims the run itself once nothing of its round waits any more (``_wait_rows.settle``): status
``tool_loop``, leased to the replica that took the decision, which resumes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.store._rows import read_run, utc_now
from agent_service.store._wait_rows import locked_run, settle
from agent_service.store.records import ApprovalNotPending, ApprovalRecord, NewApproval, RunRecord
from agent_service.store.schema import approvals, run_events
from suite_common.sql import Database
from suite_common.wire import RunApprovalDecided, dump

__all__ = ["Decided", "Decision", "RunApprovals", "decide_approvals", "hold_approvals"]


@dataclass(frozen=True, slots=True)
class Decision:
    tool_call_id: str
    approve: bool
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Decided:
    """What a decision left: the run (claimed by the decider when nothing of its round waits any more:
    ``resumed``) and its approvals."""

    record: RunRecord
    approvals: list[ApprovalRecord]
    resumed: bool


def _approval(row: Any) -> ApprovalRecord:
    return ApprovalRecord(
        run_id=row.run_id,
        tool_call_id=row.tool_call_id,
        iteration=row.iteration,
        tool=row.tool,
        server=row.server,
        arguments=row.arguments,
        status=row.status,
        message=row.message,
        decided_by=row.decided_by,
        requested_at=row.requested_at,
        decided_at=row.decided_at,
        expires_at=row.expires_at,
    )


def _approvals_of(connection: Connection, run_id: str) -> list[ApprovalRecord]:
    # The pending ones first (what a person has to decide), then by round and request.
    pending_first = sa.case((approvals.c.status == "pending", 0), else_=1)
    query = (
        sa.select(approvals)
        .where(approvals.c.run_id == run_id)
        .order_by(pending_first, approvals.c.iteration, approvals.c.requested_at, approvals.c.tool_call_id)
    )
    return [_approval(row) for row in connection.execute(query)]


def decide_approvals(
    connection: Connection, run_id: str, decisions: Sequence[Decision], decided_by: str | None, now: datetime
) -> int:
    """Record ``decisions`` of pending calls, each with its ``approval_decided`` event; the run's new ``last_seq``."""
    row = locked_run(connection, run_id)
    last_seq = row.last_seq
    events = []
    for decision in decisions:
        result = connection.execute(
            approvals.update()
            .where(
                approvals.c.run_id == run_id,
                approvals.c.tool_call_id == decision.tool_call_id,
                approvals.c.status == "pending",
            )
            .values(
                status="approved" if decision.approve else "denied",
                message=decision.message,
                decided_by=decided_by,
                decided_at=now,
            )
        )
        if result.rowcount != 1:
            raise ApprovalNotPending(run_id, decision.tool_call_id)  # the transaction is rolled back: nothing kept
        last_seq += 1
        event = RunApprovalDecided(
            run_id=run_id,
            tool_call_id=decision.tool_call_id,
            approve=decision.approve,
            message=decision.message,
            decided_by=decided_by,
        )
        events.append({"run_id": run_id, "seq": last_seq, "type": event.type, "data": dump(event)})
    if events:
        connection.execute(run_events.insert(), events)
    return int(last_seq)


def hold_approvals(
    connection: Connection, run_id: str, tenant: str, held: Sequence[NewApproval], now: datetime, expires: datetime
) -> None:
    """``held`` stored as pending approvals of the run that parks."""
    if not held:
        return
    connection.execute(
        approvals.insert(),
        [
            {
                "run_id": run_id,
                "tool_call_id": call.tool_call_id,
                "tenant": tenant,
                "iteration": call.iteration,
                "tool": call.tool,
                "server": call.server,
                "arguments": call.arguments,
                "status": "pending",
                "requested_at": now,
                "expires_at": expires,
            }
            for call in held
        ],
    )


class RunApprovals:
    """The approvals part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def decide(
        self, run_id: str, decisions: Sequence[Decision], *, decided_by: str, owner: str, lease_seconds: float
    ) -> Decided:
        """Record ``decisions`` (each of a call still pending of a run still waiting, else ``ApprovalNotPending``
        and nothing kept) with their ``approval_decided`` events; when nothing of the run waits any more (its
        questions answered too), the run is claimed for ``owner`` (status ``tool_loop``, leased)."""

        def decide(connection: Connection) -> Decided:
            now = utc_now()
            row = locked_run(connection, run_id)
            # A run whose wait ran out and that the sweep claimed (it has an owner) takes no decision any more.
            if row is None or row.status != "waiting" or row.lease_owner is not None:
                raise ApprovalNotPending(run_id, decisions[0].tool_call_id)
            last_seq = decide_approvals(connection, run_id, decisions, decided_by, now)
            resumed = settle(connection, run_id, last_seq=last_seq, owner=owner, lease_seconds=lease_seconds, now=now)
            record = read_run(connection, run_id)
            assert record is not None
            return Decided(record, _approvals_of(connection, run_id), resumed)

        return await self._db.run(f"decide approvals of run {run_id}", decide, write=True)

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        """The run's calls that needed approval, the pending ones first."""
        return await self._db.run(
            f"read the approvals of run {run_id}", lambda connection: _approvals_of(connection, run_id), write=False
        )
