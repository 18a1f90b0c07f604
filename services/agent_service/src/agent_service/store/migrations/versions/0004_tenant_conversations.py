"""Conversations are keyed by (tenant, conversation id): each tenant names its own.

An existing conversation becomes its runs' tenant's (its first run's; ``default`` for one stored without a tenant),
and the runs of a conversation get that tenant too (NULL was the default tenant's already), so that the new foreign
key from ``runs (tenant, conversation_id)`` holds for every stored run.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_DEFAULT_TENANT = "default"
"""``agent_service.core.tenancy.DEFAULT_TENANT`` as this revision knows it (a migration does not follow later code)."""


def upgrade() -> None:
    first_run_tenant = sa.text(
        "(SELECT r.tenant FROM runs r WHERE r.conversation_id = conversations.conversation_id "
        "AND r.tenant IS NOT NULL ORDER BY r.id LIMIT 1)"
    )
    op.execute(
        sa.text(f"UPDATE conversations SET tenant = COALESCE({first_run_tenant}, tenant, :default)").bindparams(
            default=_DEFAULT_TENANT
        )
    )
    op.execute(
        "UPDATE runs SET tenant = "
        "(SELECT c.tenant FROM conversations c WHERE c.conversation_id = runs.conversation_id) "
        "WHERE conversation_id IS NOT NULL"
    )
    # The old key goes first (PostgreSQL: the foreign key depends on the primary key it references). On SQLite each
    # batch rebuilds its table, with foreign keys off (see agent_service.store._engine: Database.migrate).
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("fk_runs_conversation_id_conversations", type_="foreignkey")
        batch.drop_index("ix_runs_conversation_id_id")
    with op.batch_alter_table("conversations") as batch:
        batch.alter_column("tenant", existing_type=sa.Text, nullable=False)
        batch.drop_constraint("pk_conversations", type_="primary")
        batch.create_primary_key("pk_conversations", ["tenant", "conversation_id"])
    with op.batch_alter_table("runs") as batch:
        batch.create_index("ix_runs_tenant_conversation_id_id", ["tenant", "conversation_id", "id"])
        batch.create_foreign_key(
            "fk_runs_tenant_conversations",
            "conversations",
            ["tenant", "conversation_id"],
            ["tenant", "conversation_id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        raise NotImplementedError(
            "The run store is never downgraded on SQLite: rebuilding the conversations table with foreign keys on "
            "would delete every run of a conversation (ON DELETE CASCADE). Restore a copy of the database file taken "
            "before the upgrade instead."
        )
    # Only where no conversation id is used by two tenants: the old key has room for one of each.
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("fk_runs_tenant_conversations", type_="foreignkey")
        batch.drop_index("ix_runs_tenant_conversation_id_id")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_constraint("pk_conversations", type_="primary")
        batch.create_primary_key("pk_conversations", ["conversation_id"])
        batch.alter_column("tenant", existing_type=sa.Text, nullable=True)
    with op.batch_alter_table("runs") as batch:
        batch.create_index("ix_runs_conversation_id_id", ["conversation_id", "id"])
        batch.create_foreign_key(
            "fk_runs_conversation_id_conversations",
            "conversations",
            ["conversation_id"],
            ["conversation_id"],
            ondelete="CASCADE",
        )
