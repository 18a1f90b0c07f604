"""Caller keys kept in the store (table ``caller_keys``), beside those of the callers file.

Only a key's sha256 is stored, never the key: a reader of the database learns no key. A key is found by its
digest (the table's primary key), added under a unique name, and revoked by name; a revoked key stays listed
(its name is not reused) and is never found again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.store.records import StoreError
from agent_service.store.schema import caller_keys
from suite_common.sql import Database

__all__ = ["CallerKeyStore", "KeyNameTaken", "StoredCallerKey"]


class KeyNameTaken(StoreError):
    """A key of that name is stored already (revoked or not): names tell keys apart in logs, each is used once."""

    def __init__(self, name: str) -> None:
        super().__init__(f"A caller key named {name!r} is stored already (names are never reused): choose another.")
        self.name = name


@dataclass(frozen=True, slots=True)
class StoredCallerKey:
    """A caller key as the store keeps it (no key, no digest)."""

    name: str
    tenant: str
    trusted: bool
    created_at: datetime
    revoked_at: datetime | None = None


def _record(row: sa.Row[tuple[str, str, bool, datetime, datetime | None]]) -> StoredCallerKey:
    return StoredCallerKey(
        name=row.name, tenant=row.tenant, trusted=row.trusted, created_at=row.created_at, revoked_at=row.revoked_at
    )


_COLUMNS = (
    caller_keys.c.name,
    caller_keys.c.tenant,
    caller_keys.c.trusted,
    caller_keys.c.created_at,
    caller_keys.c.revoked_at,
)
_FIND = sa.select(*_COLUMNS).where(caller_keys.c.digest == sa.bindparam("digest"), caller_keys.c.revoked_at.is_(None))


class CallerKeyStore:
    """The caller keys of the store's database; each method is one transaction (``RunStore.caller_keys``)."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def find(self, digest: bytes) -> StoredCallerKey | None:
        """The key whose sha256 is ``digest``, unless it is unknown or revoked."""

        def read(connection: Connection) -> StoredCallerKey | None:
            row = connection.execute(_FIND, {"digest": digest.hex()}).one_or_none()
            return None if row is None else _record(row)

        return await self._db.run("look up a caller key", read, write=False)

    async def add(self, digest: bytes, *, name: str, tenant: str, trusted: bool) -> StoredCallerKey:
        """Store a new key (its sha256 ``digest``); raises ``KeyNameTaken`` when ``name`` is stored already."""

        def insert(connection: Connection) -> StoredCallerKey:
            taken = connection.execute(sa.select(caller_keys.c.name).where(caller_keys.c.name == name)).first()
            if taken is not None:
                raise KeyNameTaken(name)
            key = StoredCallerKey(name=name, tenant=tenant, trusted=trusted, created_at=datetime.now(UTC))
            connection.execute(
                caller_keys.insert().values(
                    digest=digest.hex(), name=name, tenant=tenant, trusted=trusted, created_at=key.created_at
                )
            )
            return key

        return await self._db.run(f"store the caller key {name!r}", insert, write=True)

    async def list_keys(self) -> list[StoredCallerKey]:
        """Every stored key, revoked ones too, by name."""

        def read(connection: Connection) -> list[StoredCallerKey]:
            return [_record(row) for row in connection.execute(sa.select(*_COLUMNS).order_by(caller_keys.c.name))]

        return await self._db.run("list the caller keys", read, write=False)

    async def revoke(self, name: str) -> StoredCallerKey | None:
        """Revoke the key ``name`` (from now on it is never found); the key as it is then, or None when no key has
        that name. Revoking a revoked key changes nothing (its ``revoked_at`` stays the first)."""

        def update(connection: Connection) -> StoredCallerKey | None:
            connection.execute(
                caller_keys.update()
                .where(caller_keys.c.name == name, caller_keys.c.revoked_at.is_(None))
                .values(revoked_at=datetime.now(UTC))
            )
            row = connection.execute(sa.select(*_COLUMNS).where(caller_keys.c.name == name)).one_or_none()
            return None if row is None else _record(row)

        return await self._db.run(f"revoke the caller key {name!r}", update, write=True)
