"""A run's messages and events without foreign keys to their run: every write of them is guarded by the run's row.

Each of those rows cost PostgreSQL a referential check (a trigger running a query that locks the run's row) on
every step's write, about a tenth of the backend's CPU per stored run; the step's own guard (the run's row
updated, or inserted, in the same statement or transaction) already ensures the run is there. The store never
deletes a run, so the cascade the keys carried had nothing to do.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_TABLES = ("run_messages", "run_events")


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"fk_{table}_run_id_runs", type_="foreignkey")


def downgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(f"fk_{table}_run_id_runs", "runs", ["run_id"], ["run_id"], ondelete="CASCADE")
