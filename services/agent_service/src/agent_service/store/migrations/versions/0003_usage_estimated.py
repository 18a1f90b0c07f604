"""The usage log marks a call whose tokens are an estimate (cut off before the provider reported its usage).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Rows logged before are the providers' own figures: false, the default.
    with op.batch_alter_table("usage_log") as batch:
        batch.add_column(sa.Column("estimated", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("usage_log") as batch:
        batch.drop_column("estimated")
