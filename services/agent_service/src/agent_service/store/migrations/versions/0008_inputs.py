"""Questions tool servers ask during a run (MCP elicitation), waited for as approvals are.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from agent_service.store.schema import UtcDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inputs",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("input_id", sa.Text, nullable=False),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("tool_call_id", sa.Text, nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("server", sa.Text, nullable=True),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("requested_schema", sa.JSON, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("answer", sa.JSON, nullable=True),
        sa.Column("decided_by", sa.Text, nullable=True),
        sa.Column("requested_at", UtcDateTime, nullable=False),
        sa.Column("decided_at", UtcDateTime, nullable=True),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], name=op.f("fk_inputs_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "input_id", name=op.f("pk_inputs")),
    )


def downgrade() -> None:
    op.drop_table("inputs")
