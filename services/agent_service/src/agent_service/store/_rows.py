"""What the store's table families share: the time they write, a run's row read as a ``RunRecord``, stored
messages read back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.store.records import RunRecord
from agent_service.store.schema import runs
from suite_common.wire import Message, RunErrorDetail, Usage

__all__ = ["read_messages", "read_run", "run_record", "utc_now"]


def utc_now() -> datetime:
    return datetime.now(UTC)


def read_run(connection: Connection, run_id: str) -> RunRecord | None:
    row = connection.execute(sa.select(runs).where(runs.c.run_id == run_id)).one_or_none()
    return None if row is None else run_record(row)


def read_messages(connection: Connection, query: sa.Select[tuple[Any]]) -> list[Message]:
    return [Message.model_validate(message) for message in connection.execute(query).scalars()]


def run_record(row: sa.Row[Any]) -> RunRecord:
    error = RunErrorDetail(code=row.error_code, message=row.error_message or "") if row.error_code is not None else None
    return RunRecord(
        run_id=row.run_id,
        conversation_id=row.conversation_id,
        caller=row.caller,
        tenant=row.tenant,
        user=row.user_id,
        model=row.model,
        status=row.status,
        iterations=row.iterations,
        usage=Usage(input_tokens=row.input_tokens, output_tokens=row.output_tokens, cost_usd=row.cost_usd),
        finish_reason=row.finish_reason,
        budget=row.budget,
        error=error,
        plan=row.plan,
        created_at=row.created_at,
        updated_at=row.updated_at,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        resumes=row.resumes,
        cancel_requested=bool(row.cancel_requested),
        last_seq=row.last_seq,
        user_role=row.user_role,
        output=row.output,
        waiting_since=row.waiting_since,
        deadline_left_seconds=row.deadline_left_seconds,
    )
