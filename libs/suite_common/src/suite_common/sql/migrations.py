"""Bring a store's schema to the newest revision with Alembic, configured in code (no ``alembic.ini``).

Each store ships its migration scripts inside its package; their ``env.py`` calls ``run_on_store_connection``.
On PostgreSQL the upgrade holds a transaction-scoped advisory lock, so replicas that start together take turns: the
first upgrades, the others then find nothing to do. A URL upgraded once is remembered for the rest of the process.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command, context
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

from suite_common.sql.engine import Database
from suite_common.sql.errors import StoreError

__all__ = ["Migrations", "run_on_store_connection"]

_CONNECTION = "connection"
_VERSION_TABLE = "version_table"


class Migrations:
    """A store's migration scripts and how its replicas take turns running them."""

    def __init__(self, scripts: Path, *, lock_key: int, version_table: str, command: str) -> None:
        """``scripts``: the folder of ``env.py`` and ``versions/``. ``lock_key``: the PostgreSQL advisory lock of
        this store's migrations (any fixed 64-bit number, distinct per store). ``version_table``: where Alembic
        keeps the revision (distinct per store, so that two stores may share one database). ``command``: what
        an operator runs to migrate, named in the error of a schema behind."""
        self.scripts = scripts
        self.lock_key = lock_key
        self.version_table = version_table
        self.command = command
        self._upgraded: set[str] = set()
        """URLs (rendered with their passwords) already at the head revision in this process."""

    def config(self, connection: Connection | None = None) -> Config:
        config = Config()
        config.set_main_option("script_location", str(self.scripts))
        config.attributes[_VERSION_TABLE] = self.version_table
        if connection is not None:
            config.attributes[_CONNECTION] = connection
        return config

    def head(self) -> str:
        head = ScriptDirectory.from_config(self.config()).get_current_head()
        assert head is not None, f"{self.scripts} has at least one migration"
        return head

    async def upgrade(self, database: Database) -> str:
        """Upgrade ``database`` to the head revision (once per URL and process); returns the revision."""
        key = database.url.render_as_string(hide_password=False)
        if key in self._upgraded:
            return self.head()
        # A writing transaction: on SQLite it takes the write lock before Alembic reads the revision.
        revision = await database.migrate("bring the database schema up to date", self._upgrade_on)
        self._upgraded.add(key)
        return revision

    async def current(self, database: Database) -> str | None:
        return await database.run("read the database schema's revision", self._current_on, write=False)

    async def check(self, database: Database, *, migrate_setting: str) -> None:
        """``StoreError`` saying what to run when ``database``'s schema is not at the head revision."""
        current, head = await self.current(database), self.head()
        if current != head:
            raise StoreError(
                f"The {database.name.label}'s database schema is at revision {current or 'none (empty database)'}, "
                f"this version needs {head}: run {self.command}, or start with {migrate_setting}=true."
            )

    def _upgrade_on(self, connection: Connection) -> str:
        if connection.dialect.name == "postgresql":
            # Released at commit: the next replica then finds the schema at the head and does nothing.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": self.lock_key})
        command.upgrade(self.config(connection), "head")
        return self._current_on(connection) or ""

    def _current_on(self, connection: Connection) -> str | None:
        return MigrationContext.configure(connection, opts={"version_table": self.version_table}).get_current_revision()


def run_on_store_connection(metadata: sa.MetaData, *, command_hint: str) -> None:
    """The body of a store's Alembic ``env.py``: run the migrations on the connection the store handed over
    (``Migrations.upgrade``), against ``metadata``. ``command_hint``: what to run instead of Alembic's own CLI."""
    connection = context.config.attributes.get(_CONNECTION)
    if not isinstance(connection, Connection):
        raise RuntimeError(f"These migrations run through the store: {command_hint}.")
    # SQLite alters tables by copying them ("batch" mode); PostgreSQL alters them in place.
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=context.config.attributes.get(_VERSION_TABLE, "alembic_version"),
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
