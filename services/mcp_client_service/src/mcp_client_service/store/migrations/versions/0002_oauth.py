"""The OAuth vault: client registrations, tokens and pending consents of OAuth-protected servers, sealed.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from suite_common.sql import UtcDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "oauth_clients",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("server", sa.Text, nullable=False),
        sa.Column("client_encrypted", sa.Text, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "server", name="pk_oauth_clients"),
    )
    op.create_table(
        "oauth_tokens",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("server", sa.Text, nullable=False),
        sa.Column("user", sa.Text, nullable=False),
        sa.Column("token_encrypted", sa.Text, nullable=False),
        sa.Column("scopes", sa.Text, nullable=True),
        sa.Column("expires_at", UtcDateTime, nullable=True),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "server", "user", name="pk_oauth_tokens"),
    )
    op.create_table(
        "oauth_consents",
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("server", sa.Text, nullable=False),
        sa.Column("user", sa.Text, nullable=False),
        sa.Column("pending_encrypted", sa.Text, nullable=False),
        sa.Column("code_encrypted", sa.Text, nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
        sa.PrimaryKeyConstraint("state", name="pk_oauth_consents"),
    )
    op.create_index("ix_oauth_consents_tenant_server_user", "oauth_consents", ["tenant", "server", "user"])
    op.create_index("ix_oauth_consents_expires_at", "oauth_consents", ["expires_at"])


def downgrade() -> None:
    op.drop_table("oauth_consents")
    op.drop_table("oauth_tokens")
    op.drop_table("oauth_clients")
