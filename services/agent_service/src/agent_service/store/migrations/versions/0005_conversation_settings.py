"""A conversation keeps its settings: what its newest run asked for (model, persona, tools, reasoning, verbosity,
maximum output tokens) and the system prompt it started with, so that a client continues it with the same ones.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Conversations stored before have none: NULL (a client then uses its own defaults).
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("settings", sa.JSON, nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        raise NotImplementedError(
            "The run store is never downgraded on SQLite: rebuilding the conversations table with foreign keys on "
            "would delete every run of a conversation (ON DELETE CASCADE). Restore a copy of the database file taken "
            "before the upgrade instead."
        )
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("settings")
