"""What every kind of wait of a run shares in the store: its run's row, locked, and the claim of a run once nothing
of its round is pending any more (no approval undecided, no question unanswered)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.store.schema import approvals, inputs, runs

__all__ = ["locked_run", "pending_count", "settle"]


def locked_run(connection: Connection, run_id: str) -> Any:
    """The run's row, locked until the transaction ends on PostgreSQL (SQLite's write transaction holds the
    database): a decision, an answer and the sweep never both claim it."""
    return connection.execute(
        sa.select(runs.c.status, runs.c.lease_owner, runs.c.last_seq, runs.c.tenant)
        .where(runs.c.run_id == run_id)
        .with_for_update()
    ).one_or_none()


def pending_count(connection: Connection, run_id: str) -> int:
    """What of the run still waits for a person: its undecided approvals and unanswered questions."""
    total = 0
    for table in (approvals, inputs):
        total += connection.execute(
            sa.select(sa.func.count()).select_from(table).where(table.c.run_id == run_id, table.c.status == "pending")
        ).scalar_one()
    return int(total)


def settle(
    connection: Connection, run_id: str, *, last_seq: int, owner: str, lease_seconds: float, now: datetime
) -> bool:
    """After a decision or an answer: the run's ``last_seq`` kept, and, when nothing waits any more, the run claimed
    for ``owner`` (status ``tool_loop``, leased, ``resumes`` unchanged). Whether it was claimed."""
    values: dict[str, Any] = {"last_seq": last_seq, "updated_at": now}
    resumed = pending_count(connection, run_id) == 0
    if resumed:
        values.update(
            status="tool_loop",
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            waiting_since=None,
        )
    connection.execute(runs.update().where(runs.c.run_id == run_id).values(**values))
    return resumed
