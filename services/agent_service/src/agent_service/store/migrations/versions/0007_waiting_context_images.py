"""Runs that wait for approvals, conversations that keep fitting, images kept by content, and structured answers.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from agent_service.store.schema import UtcDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("waiting_since", UtcDateTime, nullable=True))
        batch.add_column(sa.Column("deadline_left_seconds", sa.Float, nullable=True))
        batch.add_column(sa.Column("output", sa.JSON, nullable=True))
    op.create_table(
        "approvals",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("tool_call_id", sa.Text, nullable=False),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("tool", sa.Text, nullable=False),
        sa.Column("server", sa.Text, nullable=True),
        sa.Column("arguments", sa.JSON, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("message", sa.Text, nullable=True),
        sa.Column("decided_by", sa.Text, nullable=True),
        sa.Column("requested_at", UtcDateTime, nullable=False),
        sa.Column("decided_at", UtcDateTime, nullable=True),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name=op.f("fk_approvals_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "tool_call_id", name=op.f("pk_approvals")),
    )
    op.create_table(
        "conversation_summaries",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("conversation_id", sa.Text, nullable=False),
        sa.Column("covers", sa.Integer, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("tokens", sa.Integer, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant", "conversation_id"],
            ["conversations.tenant", "conversations.conversation_id"],
            name=op.f("fk_conversation_summaries_tenant_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant", "conversation_id", name=op.f("pk_conversation_summaries")),
    )
    op.create_table(
        "images",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("media_type", sa.Text, nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "sha256", name=op.f("pk_images")),
    )


def downgrade() -> None:
    op.drop_table("images")
    op.drop_table("conversation_summaries")
    op.drop_table("approvals")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("output")
        batch.drop_column("deadline_left_seconds")
        batch.drop_column("waiting_since")
