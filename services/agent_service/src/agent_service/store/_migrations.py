"""Bring a database's schema to the newest revision with Alembic, configured in code (no ``alembic.ini``).

The migration scripts ship inside the package (``agent_service/store/migrations``). On PostgreSQL the upgrade
holds a transaction-scoped advisory lock, so replicas that start together take turns: the first upgrades, the
others then find nothing to do. A URL upgraded once is remembered for the rest of the process.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

from agent_service.store._engine import Database

__all__ = ["MIGRATION_LOCK_KEY", "alembic_config", "current_revision", "head_revision", "upgrade"]

MIGRATION_LOCK_KEY = 0x6167656E7473
"""The PostgreSQL advisory lock the replicas take turns on while migrating (any fixed 64-bit number)."""

_MIGRATIONS = Path(__file__).parent / "migrations"
_upgraded: set[str] = set()
"""URLs (rendered with their passwords) already at the head revision in this process."""


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the run store has at least one migration"
    return head


async def upgrade(database: Database) -> str:
    """Upgrade ``database`` to the head revision (once per URL and process); returns the revision."""
    key = database.url.render_as_string(hide_password=False)
    if key in _upgraded:
        return head_revision()
    # A writing transaction: on SQLite it takes the write lock before Alembic reads the revision.
    revision = await database.migrate("bring the database schema up to date", _upgrade_on)
    _upgraded.add(key)
    return revision


async def current_revision(database: Database) -> str | None:
    return await database.run("read the database schema's revision", _current_on, write=False)


def _upgrade_on(connection: Connection) -> str:
    if connection.dialect.name == "postgresql":
        # Released at commit: the next replica then finds the schema at the head and does nothing.
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
    return _current_on(connection) or ""


def _current_on(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()
