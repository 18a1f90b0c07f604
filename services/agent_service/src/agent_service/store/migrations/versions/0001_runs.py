"""Runs, their messages and events, and conversations.

Revision ID: 0001
Revises:
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from agent_service.store.schema import UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("conversation_id", sa.Text, nullable=False),
        sa.Column("caller", sa.Text, nullable=True),
        sa.Column("tenant", sa.Text, nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", name="pk_conversations"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("conversation_id", sa.Text, nullable=True),
        sa.Column("caller", sa.Text, nullable=True),
        sa.Column("tenant", sa.Text, nullable=True),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("iterations", sa.Integer, nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("finish_reason", sa.Text, nullable=True),
        sa.Column("error_code", sa.Text, nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("plan", sa.JSON, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("lease_owner", sa.Text, nullable=True),
        sa.Column("lease_expires_at", UtcDateTime, nullable=True),
        sa.Column("resumes", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("last_seq", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint("run_id", name="uq_runs_run_id"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.conversation_id"],
            name="fk_runs_conversation_id_conversations",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_runs_status_lease_expires_at", "runs", ["status", "lease_expires_at"])
    op.create_index("ix_runs_conversation_id_id", "runs", ["conversation_id", "id"])
    op.create_table(
        "run_messages",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("message", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "position", name="pk_run_messages"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_messages_run_id_runs", ondelete="CASCADE"),
    )
    op.create_table(
        "run_events",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq", name="pk_run_events"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name="fk_run_events_run_id_runs", ondelete="CASCADE"),
    )


def downgrade() -> None:
    op.drop_table("run_events")
    op.drop_table("run_messages")
    op.drop_index("ix_runs_conversation_id_id", table_name="runs")
    op.drop_index("ix_runs_status_lease_expires_at", table_name="runs")
    op.drop_table("runs")
    op.drop_table("conversations")
