"""The run store's migrations (``migrations/``), run with ``suite_common.sql.Migrations``: at start (replicas take
turns under an advisory lock) or by ``python -m agent_service.store.migrate``."""

from __future__ import annotations

from pathlib import Path

from suite_common.sql import Migrations

__all__ = ["MIGRATIONS"]

MIGRATIONS = Migrations(
    Path(__file__).parent / "migrations",
    lock_key=0x6167656E7473,  # "agents"
    version_table="alembic_version",  # Alembic's default, which the run store has always used
    command="python -m agent_service.store.migrate",
)
