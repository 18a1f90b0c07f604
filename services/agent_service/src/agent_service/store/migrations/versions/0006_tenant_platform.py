"""Tenants as platforms: key roles, the tool-call audit log, each tenant's runtime settings, and which model answered
each LLM call (and how long it took).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from agent_service.store.schema import UtcDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Keys stored before roles existed run only (NULL), as they did.
    with op.batch_alter_table("caller_keys") as batch:
        batch.add_column(sa.Column("role", sa.Text, nullable=True))
    # A run's end user's role (X-User-Role); runs stored before roles were "user"s (NULL).
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("user_role", sa.Text, nullable=True))
    with op.batch_alter_table("usage_log") as batch:
        batch.add_column(sa.Column("answered_model", sa.Text, nullable=True))
        batch.add_column(sa.Column("latency_ms", sa.Float, nullable=True))
    op.create_table(
        "tool_calls",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=True),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("user_id", sa.Text, nullable=True),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("call_index", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("tool_call_id", sa.Text, nullable=False),
        sa.Column("server", sa.Text, nullable=True),
        sa.Column("tool", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("latency_ms", sa.Float, nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_calls")),
        sa.UniqueConstraint(
            "run_id",
            "iteration",
            "call_index",
            "attempt",
            name=op.f("uq_tool_calls_run_id_iteration_call_index_attempt"),
        ),
    )
    op.create_index(op.f("ix_tool_calls_tenant_created_at"), "tool_calls", ["tenant", "created_at"])
    op.create_table(
        "tenant_runtime",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("settings", sa.JSON, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("updated_by", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_tenant_runtime")),
    )


def downgrade() -> None:
    op.drop_table("tenant_runtime")
    op.drop_index(op.f("ix_tool_calls_tenant_created_at"), table_name="tool_calls")
    op.drop_table("tool_calls")
    with op.batch_alter_table("usage_log") as batch:
        batch.drop_column("latency_ms")
        batch.drop_column("answered_model")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("user_role")
    with op.batch_alter_table("caller_keys") as batch:
        batch.drop_column("role")
