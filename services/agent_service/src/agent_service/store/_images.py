"""The store's images (table ``images``): each tenant's images of its stored runs, once by content (sha256).

A message keeps ``/api/v1/agent/images/<sha256>`` (``core.images.by_reference``); the bytes live here, written before
the message that refers to them (an image written for a step that then failed is harmless: the same content is the
same row), read back before an LLM call and by ``GET /api/v1/agent/images/{sha256}``.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite

from agent_service.core.images import DecodedImage
from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.store._rows import utc_now
from agent_service.store.schema import images, runs
from suite_common.sql import Database

__all__ = ["StoredImages"]


class StoredImages:
    """The images part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def put_images(self, tenant: str, new: Iterable[DecodedImage]) -> None:
        """Keep ``new`` as ``tenant``'s; an image it has already (the same sha256) is left as it is."""
        rows = _rows(new)
        if rows:
            await self._db.run(
                f"store {len(rows)} images of tenant {tenant}", lambda db: _insert(db, tenant, rows), write=True
            )

    async def images(self, tenant: str, shas: Iterable[str]) -> dict[str, DecodedImage]:
        """``tenant``'s images among ``shas``, by sha256 (one it does not have is missing from the answer)."""
        wanted = sorted(set(shas))
        if not wanted:
            return {}
        column = images.c
        query = sa.select(column.sha256, column.media_type, column.data).where(
            column.tenant == tenant, column.sha256.in_(wanted)
        )

        def read(connection: Connection) -> dict[str, DecodedImage]:
            return {row.sha256: DecodedImage(row.media_type, bytes(row.data)) for row in connection.execute(query)}

        return await self._db.run(f"read {len(wanted)} images of tenant {tenant}", read, write=False)

    async def put_run_images(self, run_id: str, new: Iterable[DecodedImage]) -> None:
        """Keep ``new`` as the images of ``run_id``'s tenant (read from the run's row in the same transaction)."""
        rows = _rows(new)
        if not rows:
            return

        def put(connection: Connection) -> None:
            tenant = connection.execute(sa.select(runs.c.tenant).where(runs.c.run_id == run_id)).scalar_one_or_none()
            _insert(connection, tenant or DEFAULT_TENANT, rows)

        await self._db.run(f"store {len(rows)} images of run {run_id}", put, write=True)


def _rows(new: Iterable[DecodedImage]) -> list[DecodedImage]:
    """``new`` without repeats (the same image twice in one write)."""
    return list({image.sha256: image for image in new}.values())


def _insert(connection: Connection, tenant: str, new: list[DecodedImage]) -> None:
    now = utc_now()
    rows = [
        {
            "tenant": tenant,
            "sha256": image.sha256,
            "media_type": image.media_type,
            "size_bytes": len(image.data),
            "data": image.data,
            "created_at": now,
        }
        for image in new
    ]
    insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
    statement = insert(images).on_conflict_do_nothing(index_elements=[images.c.tenant, images.c.sha256])
    connection.execute(statement, rows)
