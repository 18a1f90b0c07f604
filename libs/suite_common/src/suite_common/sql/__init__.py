"""The SQL plumbing the services' stores share (optional extra ``sql``: SQLAlchemy, asyncpg, Alembic).

A store is SQLite (``sqlite:///path``, one replica) or PostgreSQL (``postgresql://...``, any number of replicas)
behind one interface: ``database_url`` and ``open_database`` (``engine``), transactions as plain functions of a
SQLAlchemy ``Connection``, every failure a ``StoreError``, ``UtcDateTime`` columns (``types``) and Alembic
migrations run on the store's own connection (``migrations``). What each store keeps stays in its service.
"""

from suite_common.sql.engine import (
    SQLITE_BUSY_TIMEOUT_SECONDS,
    STATEMENT_TIMEOUT_SECONDS,
    Database,
    PostgresDatabase,
    SqliteDatabase,
    StoreName,
    compact_json,
    configure_sqlite,
    database_url,
    open_database,
    translate_errors,
)
from suite_common.sql.errors import StoreError
from suite_common.sql.migrations import Migrations, run_on_store_connection
from suite_common.sql.types import UtcDateTime, sqlite_time, store_metadata

__all__ = [
    "SQLITE_BUSY_TIMEOUT_SECONDS",
    "STATEMENT_TIMEOUT_SECONDS",
    "Database",
    "Migrations",
    "PostgresDatabase",
    "SqliteDatabase",
    "StoreError",
    "StoreName",
    "UtcDateTime",
    "compact_json",
    "configure_sqlite",
    "database_url",
    "open_database",
    "run_on_store_connection",
    "sqlite_time",
    "store_metadata",
    "translate_errors",
]
