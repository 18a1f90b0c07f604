"""The store's tenant runtimes (table ``tenant_runtime``): what each tenant's admin set through
``PATCH /api/v1/admin/runtime``, as the wire JSON of the fields it set; the caps and the defaults are the operator's
and live elsewhere (``agent_service.admission.tenant_runtime``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite

from agent_service.store._rows import utc_now
from agent_service.store.schema import tenant_runtime
from suite_common.sql import Database

__all__ = ["TenantRuntimeSettings"]


class TenantRuntimeSettings:
    """The tenant runtime part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def tenant_runtime(self, tenant: str) -> dict[str, Any]:
        """The fields ``tenant``'s admin set (wire names to values); empty when it set none."""
        query = sa.select(tenant_runtime.c.settings).where(tenant_runtime.c.tenant == tenant)

        def read(connection: Connection) -> dict[str, Any]:
            stored = connection.execute(query).scalar_one_or_none()
            return dict(stored) if isinstance(stored, dict) else {}

        return await self._db.run(f"read the runtime of tenant {tenant}", read, write=False)

    async def change_tenant_runtime(
        self, tenant: str, changes: Mapping[str, Any], *, updated_by: str | None
    ) -> dict[str, Any]:
        """Merge ``changes`` (wire names; ``None`` clears a field) into what ``tenant``'s admin set, in one
        transaction (two admins changing different fields at once both keep theirs); answers the merged fields.
        ``updated_by``: the key's name, never the key."""

        def change(connection: Connection) -> dict[str, Any]:
            read = sa.select(tenant_runtime.c.settings).where(tenant_runtime.c.tenant == tenant)
            if connection.dialect.name == "postgresql":
                read = read.with_for_update()  # SQLite's write transaction holds the whole database already
            stored = connection.execute(read).scalar_one_or_none()
            merged = {**(stored if isinstance(stored, dict) else {}), **changes}
            merged = {name: value for name, value in merged.items() if value is not None}
            row = {"tenant": tenant, "settings": merged, "updated_at": utc_now(), "updated_by": updated_by}
            insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
            statement = insert(tenant_runtime).values(row)
            connection.execute(
                statement.on_conflict_do_update(
                    index_elements=[tenant_runtime.c.tenant],
                    set_={name: statement.excluded[name] for name in ("settings", "updated_at", "updated_by")},
                )
            )
            return merged

        return await self._db.run(f"change the runtime of tenant {tenant}", change, write=True)
