"""The store's tool-call audit log (table ``tool_calls``), read a page at a time.

A run's tool calls are written with its steps (``_steps``), one row each; this is what ``GET /api/v1/agent/audit``
pages through: a tenant's rows, newest first, narrowed by time, tool, status and end user.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.store.records import AuditCursor, AuditedCall, AuditFilter
from agent_service.store.schema import tool_calls
from suite_common.sql import Database

__all__ = ["ToolCallAudit"]

_NEWEST_FIRST = (tool_calls.c.created_at.desc(), tool_calls.c.id.desc())


def _audited(row: sa.Row[Any]) -> AuditedCall:
    return AuditedCall(
        id=row.id,
        tenant=row.tenant,
        user=row.user_id,
        run_id=row.run_id,
        iteration=row.iteration,
        call_index=row.call_index,
        attempt=row.attempt,
        tool_call_id=row.tool_call_id,
        server=row.server,
        tool=row.tool,
        status=row.status,
        latency_ms=row.latency_ms,
        created_at=row.created_at,
    )


def _conditions(tenant: str, where: AuditFilter, after: AuditCursor | None) -> list[sa.ColumnElement[bool]]:
    """The tenant's rows (the index's leading column) that ``where`` and the cursor let through."""
    column = tool_calls.c
    conditions = [column.tenant == tenant]
    if where.start is not None:
        conditions.append(column.created_at >= where.start)
    if where.end is not None:
        conditions.append(column.created_at < where.end)
    if where.tool is not None:
        conditions.append(column.tool == where.tool)
    if where.status is not None:
        conditions.append(column.status == where.status)
    if where.user is not None:
        conditions.append(column.user_id == where.user)
    if after is not None:
        # Strictly older than the previous page's last row, in the page order (time, then row number: two calls of
        # the same instant keep one order).
        moment, row_id = after
        conditions.append(sa.or_(column.created_at < moment, sa.and_(column.created_at == moment, column.id < row_id)))
    return conditions


class ToolCallAudit:
    """The audit log part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def audited_calls(
        self, tenant: str, where: AuditFilter, *, limit: int, after: AuditCursor | None = None
    ) -> tuple[list[AuditedCall], AuditCursor | None]:
        """Up to ``limit`` of ``tenant``'s audit rows that ``where`` lets through, newest first, from after ``after``
        (the cursor a previous page returned); with the cursor of the next page (``None``: there is none)."""
        query = (
            sa.select(tool_calls).where(*_conditions(tenant, where, after)).order_by(*_NEWEST_FIRST).limit(limit + 1)
        )

        def read(connection: Connection) -> list[AuditedCall]:
            return [_audited(row) for row in connection.execute(query)]

        calls = await self._db.run(f"read the tool-call audit of tenant {tenant}", read, write=False)
        if len(calls) <= limit:
            return calls, None
        last = calls[limit - 1]
        return calls[:limit], (last.created_at, last.id)
