"""Tenants: the end user of runs and conversations, runs' cost and budget, the usage log, caller keys.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from agent_service.store.schema import UtcDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch_alter_table: SQLite adds columns in place; nothing here needs a table rebuild.
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("user_id", sa.Text, nullable=True))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("user_id", sa.Text, nullable=True))
        batch.add_column(sa.Column("cost_usd", sa.Float, nullable=True))
        batch.add_column(sa.Column("budget", sa.Text, nullable=True))
    op.create_table(
        "usage_log",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("user_id", sa.Text, nullable=True),
        sa.Column("caller", sa.Text, nullable=True),
        sa.Column("run_id", sa.Text, nullable=True),
        sa.Column("iteration", sa.Integer, nullable=True),
        sa.Column("attempt", sa.Integer, nullable=True),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("provider", sa.Text, nullable=True),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_usage_log"),
        sa.UniqueConstraint("run_id", "iteration", "attempt", name="uq_usage_log_run_id_iteration_attempt"),
    )
    op.create_index("ix_usage_log_tenant_created_at", "usage_log", ["tenant", "created_at"])
    op.create_index("ix_usage_log_tenant_user_id_created_at", "usage_log", ["tenant", "user_id", "created_at"])
    op.create_table(
        "caller_keys",
        sa.Column("digest", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("trusted", sa.Boolean, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("revoked_at", UtcDateTime, nullable=True),
        sa.PrimaryKeyConstraint("digest", name="pk_caller_keys"),
        sa.UniqueConstraint("name", name="uq_caller_keys_name"),
    )


def downgrade() -> None:
    op.drop_table("caller_keys")
    op.drop_index("ix_usage_log_tenant_user_id_created_at", table_name="usage_log")
    op.drop_index("ix_usage_log_tenant_created_at", table_name="usage_log")
    op.drop_table("usage_log")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("budget")
        batch.drop_column("cost_usd")
        batch.drop_column("user_id")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("user_id")
