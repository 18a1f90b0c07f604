"""A tenant server's ``auth`` block (OAuth), sealed like its header values.

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
    op.add_column("tenant_servers", sa.Column("auth_encrypted", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("tenant_servers", "auth_encrypted")
