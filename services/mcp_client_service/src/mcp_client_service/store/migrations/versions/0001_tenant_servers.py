"""Tenant servers (each with the revision of its last change), deleted ones' revisions, and the registry's revision
counter.

Revision ID: 0001
Revises:
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from suite_common.sql import UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenant_servers",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("transport", sa.Text, nullable=False),
        sa.Column("headers_encrypted", sa.Text, nullable=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("allowed_tools", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("tools", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("revision", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "name", name="pk_tenant_servers"),
        sa.CheckConstraint("transport IN ('streamable-http', 'sse')", name="ck_tenant_servers_transport"),
    )
    op.create_index("ix_tenant_servers_revision", "tenant_servers", ["revision"])
    op.create_table(
        "tenant_server_deletions",
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("revision", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("tenant", "name", name="pk_tenant_server_deletions"),
    )
    op.create_index("ix_tenant_server_deletions_revision", "tenant_server_deletions", ["revision"])
    revisions = op.create_table(
        "registry_revision",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("revision", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_registry_revision"),
    )
    op.bulk_insert(revisions, [{"id": 1, "revision": 0}])


def downgrade() -> None:
    op.drop_table("registry_revision")
    op.drop_table("tenant_server_deletions")
    op.drop_table("tenant_servers")
