"""The store's usage log (table ``usage_log``): an LLM call made outside any run logged, the log summed.

A run's calls are logged with its steps (``_steps``); these sums are what the usage API answers and what a monthly
budget starts from.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.store._rows import utc_now
from agent_service.store.records import ModelUsage
from agent_service.store.schema import usage_log
from suite_common.sql import Database
from suite_common.wire import Usage

if TYPE_CHECKING:
    from agent_service.core.run import LlmCall

__all__ = ["UsageLog"]

_INSERT_USAGE = usage_log.insert()


_USAGE_SUMS = (
    sa.func.coalesce(sa.func.sum(usage_log.c.input_tokens), 0).label("input_tokens"),
    sa.func.coalesce(sa.func.sum(usage_log.c.output_tokens), 0).label("output_tokens"),
    # NULL when no call had a price (SUM skips NULLs, and is NULL over none).
    sa.func.sum(usage_log.c.cost_usd).label("cost_usd"),
)


def _usage_of(tenant: str, user: str | None) -> list[sa.ColumnElement[bool]]:
    """The usage log rows of ``tenant`` (and of ``user``): the index's leading columns, as equalities."""
    conditions = [usage_log.c.tenant == tenant]
    if user is not None:
        conditions.append(usage_log.c.user_id == user)
    return conditions


def _usage(row: sa.Row[Any]) -> Usage:
    cost = row.cost_usd
    return Usage(
        input_tokens=int(row.input_tokens),
        output_tokens=int(row.output_tokens),
        cost_usd=float(cost) if cost is not None else None,
    )


class UsageLog:
    """The usage log part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def usage_by_model(
        self, tenant: str, start: datetime, end: datetime, *, user: str | None = None
    ) -> list[ModelUsage]:
        """The usage log of ``tenant`` (of its end user ``user`` only, unless ``None``) over ``[start, end)``, summed
        per model, by model name: one aggregate query over the index on ``(tenant, [user_id,] created_at)``."""
        query = (
            sa.select(usage_log.c.model, sa.func.count().label("calls"), *_USAGE_SUMS)
            .where(*_usage_of(tenant, user), usage_log.c.created_at >= start, usage_log.c.created_at < end)
            .group_by(usage_log.c.model)
            .order_by(usage_log.c.model)
        )

        def read(connection: Connection) -> list[ModelUsage]:
            rows = connection.execute(query)
            return [ModelUsage(model=row.model, calls=row.calls, usage=_usage(row)) for row in rows]

        return await self._db.run(f"sum the usage of tenant {tenant}", read, write=False)

    async def log_usage(self, call: LlmCall, *, tenant: str, user: str | None, caller: str | None) -> None:
        """One usage log row for an LLM call made outside any stored run (a plain completion of the OpenAI front;
        a run's calls are logged with its steps). Its run, round and attempt are NULL: the log's unique key never
        matches it (NULLs are distinct under UNIQUE on both backends), so every such call is a row of its own."""
        row = {
            "tenant": tenant,
            "user_id": user,
            "caller": caller,
            "run_id": None,
            "model": call.model,
            "provider": call.provider or None,
            "input_tokens": call.usage.input_tokens,
            "output_tokens": call.usage.output_tokens,
            "cost_usd": call.usage.cost_usd,
            "estimated": call.estimated,
            "created_at": utc_now(),
        }
        await self._db.run(
            f"log the usage of tenant {tenant}", lambda connection: connection.execute(_INSERT_USAGE, row), write=True
        )

    async def usage_since(self, tenant: str, since: datetime, *, user: str | None = None) -> Usage:
        """The tokens and cost of ``tenant``'s LLM calls (of its end user ``user`` only, unless ``None``) since
        ``since``: where a monthly budget starts from."""
        query = sa.select(*_USAGE_SUMS).where(*_usage_of(tenant, user), usage_log.c.created_at >= since)

        def read(connection: Connection) -> Usage:
            return _usage(connection.execute(query).one())

        return await self._db.run(f"sum the usage of tenant {tenant}", read, write=False)
