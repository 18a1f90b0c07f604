"""Runs that wait for approvals (table ``approvals``, and the waiting columns of ``runs``): parked by their owner,
decided by a caller, their wait run out, cancelled while they wait.

A waiting run has no lease owner; its ``lease_expires_at`` is its wait's limit, after which the lease sweep claims it
(``_leases.claim_expired``, status still ``waiting``) and its claimer denies what is undecided (``expire_wait``).
A decision claims the run itself once no call of its round waits any more: status ``tool_loop``, leased to the
replica that took the decision, which resumes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.store._rows import read_run, utc_now
from agent_service.store.records import (
    ACTIVE_STATUSES,
    ApprovalNotPending,
    ApprovalRecord,
    LeaseLost,
    NewApproval,
    RunRecord,
    StoredEvent,
)
from agent_service.store.schema import approvals, run_events, run_messages, runs
from suite_common.sql import Database
from suite_common.wire import Message, RunApprovalDecided, dump

__all__ = ["Decided", "Decision", "RunApprovals"]


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


def _locked_run(connection: Connection, run_id: str) -> Any:
    """The run's row, locked until the transaction ends on PostgreSQL (SQLite's write transaction holds the
    database): a decision and the sweep never both claim it."""
    return connection.execute(
        sa.select(runs.c.status, runs.c.lease_owner, runs.c.last_seq, runs.c.tenant)
        .where(runs.c.run_id == run_id)
        .with_for_update()
    ).one_or_none()


def _decide(
    connection: Connection, run_id: str, decisions: Sequence[Decision], decided_by: str | None, now: datetime
) -> int:
    """Record ``decisions`` of pending calls, each with its ``approval_decided`` event; the run's new ``last_seq``."""
    row = _locked_run(connection, run_id)
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


def _pending(connection: Connection, run_id: str) -> int:
    return int(
        connection.execute(
            sa.select(sa.func.count())
            .select_from(approvals)
            .where(approvals.c.run_id == run_id, approvals.c.status == "pending")
        ).scalar_one()
    )


class RunApprovals:
    """The approvals part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def park(
        self,
        run_id: str,
        events: list[StoredEvent],
        held: list[NewApproval],
        *,
        owner: str,
        wait_seconds: float,
        deadline_left_seconds: float,
    ) -> bool:
        """The run begins to wait: ``events`` stored, its status ``waiting`` without a lease owner until
        now + ``wait_seconds``, ``held`` stored as pending approvals. ``False`` (writing nothing): its cancel was
        asked for, it is not parked (a waiting run is not stopped by its lease: the cancel would be lost). Raises
        ``LeaseLost`` (writing nothing) when ``owner`` no longer holds the run."""

        def park(connection: Connection) -> bool:
            now = utc_now()
            expires = now + timedelta(seconds=wait_seconds)
            values: dict[str, Any] = {
                "status": "waiting",
                "lease_owner": None,
                "lease_expires_at": expires,
                "waiting_since": now,
                "deadline_left_seconds": deadline_left_seconds,
                "updated_at": now,
            }
            if events:
                values["last_seq"] = events[-1].seq  # numbered on from the run's last stored one
            result = connection.execute(
                runs.update()
                .where(
                    runs.c.run_id == run_id,
                    runs.c.lease_owner == owner,
                    runs.c.status.in_(ACTIVE_STATUSES),
                    runs.c.cancel_requested.is_(False),
                )
                .values(**values)
            )
            if result.rowcount != 1:
                cancelled = connection.execute(
                    sa.select(runs.c.run_id).where(
                        runs.c.run_id == run_id,
                        runs.c.lease_owner == owner,
                        runs.c.status.in_(ACTIVE_STATUSES),
                        runs.c.cancel_requested.is_(True),
                    )
                ).one_or_none()
                if cancelled is not None:
                    return False
                raise LeaseLost(f"Run {run_id} is no longer held by {owner}.")
            if events:
                connection.execute(
                    run_events.insert(),
                    [{"run_id": run_id, "seq": e.seq, "type": e.type, "data": e.data} for e in events],
                )
            tenant = connection.execute(sa.select(runs.c.tenant).where(runs.c.run_id == run_id)).scalar_one()
            connection.execute(
                approvals.insert(),
                [
                    {
                        "run_id": run_id,
                        "tool_call_id": call.tool_call_id,
                        "tenant": tenant or DEFAULT_TENANT,
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
            return True

        return await self._db.run(f"park run {run_id} to wait for approvals", park, write=True)

    async def decide(
        self, run_id: str, decisions: Sequence[Decision], *, decided_by: str, owner: str, lease_seconds: float
    ) -> Decided:
        """Record ``decisions`` (each of a call still pending of a run still waiting, else ``ApprovalNotPending``
        and nothing kept) with their ``approval_decided`` events; when no call waits any more, the run is claimed
        for ``owner`` (status ``tool_loop``, leased, ``resumes`` unchanged)."""

        def decide(connection: Connection) -> Decided:
            now = utc_now()
            row = _locked_run(connection, run_id)
            # A run whose wait ran out and that the sweep claimed (it has an owner) takes no decision any more.
            if row is None or row.status != "waiting" or row.lease_owner is not None:
                raise ApprovalNotPending(run_id, decisions[0].tool_call_id)
            last_seq = _decide(connection, run_id, decisions, decided_by, now)
            values: dict[str, Any] = {"last_seq": last_seq, "updated_at": now}
            resumed = _pending(connection, run_id) == 0
            if resumed:
                values.update(
                    status="tool_loop",
                    lease_owner=owner,
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                    waiting_since=None,
                )
            connection.execute(runs.update().where(runs.c.run_id == run_id).values(**values))
            record = read_run(connection, run_id)
            assert record is not None
            return Decided(record, _approvals_of(connection, run_id), resumed)

        return await self._db.run(f"decide approvals of run {run_id}", decide, write=True)

    async def expire_wait(self, run_id: str, *, owner: str, message: str) -> RunRecord | None:
        """A waiting run ``owner`` claimed once its wait ran out: its undecided calls denied with ``message``
        (``approval_decided`` events, by nobody), its status ``tool_loop``. ``None``: the run is not ``owner``'s
        waiting run any more (decided meanwhile, or cancelled)."""

        def expire(connection: Connection) -> RunRecord | None:
            now = utc_now()
            row = _locked_run(connection, run_id)
            if row is None or row.status != "waiting" or row.lease_owner != owner:
                return None
            pending = connection.execute(
                sa.select(approvals.c.tool_call_id)
                .where(approvals.c.run_id == run_id, approvals.c.status == "pending")
                .order_by(approvals.c.iteration, approvals.c.requested_at, approvals.c.tool_call_id)
            ).scalars()
            decisions = [Decision(tool_call_id, approve=False, message=message) for tool_call_id in pending]
            last_seq = _decide(connection, run_id, decisions, None, now)
            connection.execute(
                runs.update()
                .where(runs.c.run_id == run_id)
                .values(status="tool_loop", waiting_since=None, last_seq=last_seq, updated_at=now)
            )
            return read_run(connection, run_id)

        return await self._db.run(f"end the wait of run {run_id}", expire, write=True)

    async def approvals(self, run_id: str) -> list[ApprovalRecord]:
        """The run's calls that needed approval, the pending ones first."""
        return await self._db.run(
            f"read the approvals of run {run_id}", lambda connection: _approvals_of(connection, run_id), write=False
        )

    async def cancel_waiting(
        self, run_id: str, answers: list[tuple[int, Message]], done: StoredEvent
    ) -> RunRecord | None:
        """End a run that waits (nobody executes it): its held calls answered (``answers``: positions in the run),
        its pending approvals denied, ``done`` stored as its last event, status ``cancelled``. ``None``: it was not
        waiting (any more)."""

        def cancel(connection: Connection) -> RunRecord | None:
            now = utc_now()
            row = _locked_run(connection, run_id)
            if row is None or row.status != "waiting" or row.lease_owner is not None:
                return None
            connection.execute(
                approvals.update()
                .where(approvals.c.run_id == run_id, approvals.c.status == "pending")
                .values(status="denied", message="The run was cancelled.", decided_at=now)
            )
            if answers:
                connection.execute(
                    run_messages.insert(),
                    [
                        {
                            "run_id": run_id,
                            "position": position,
                            "message": message.model_dump(mode="json", by_alias=True, exclude_none=True),
                        }
                        for position, message in answers
                    ],
                )
            seq = max(done.seq, row.last_seq + 1)
            connection.execute(
                run_events.insert(), [{"run_id": run_id, "seq": seq, "type": done.type, "data": done.data}]
            )
            connection.execute(
                runs.update()
                .where(runs.c.run_id == run_id)
                .values(
                    status="cancelled",
                    finish_reason="cancelled",
                    cancel_requested=True,
                    lease_owner=None,
                    lease_expires_at=None,
                    waiting_since=None,
                    last_seq=seq,
                    updated_at=now,
                )
            )
            return read_run(connection, run_id)

        return await self._db.run(f"cancel the waiting run {run_id}", cancel, write=True)
