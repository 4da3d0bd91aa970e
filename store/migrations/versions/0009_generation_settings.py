"""A language model's generation settings per deployment: `prefill_chunk` (prompt tokens prefilled per round)
and `max_waiting` (sequences allowed to wait for a place in the batch; past it a 429). Rows written before get
the defaults the engine used until now.

Revision ID: 0009_generation_settings
Revises: 0008_replicas
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_generation_settings"
down_revision = "0008_replicas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # In place, never by copying the table (see 0006).
    with op.batch_alter_table("deployments", recreate="never") as batch:
        batch.add_column(sa.Column("prefill_chunk", sa.Integer, nullable=False, server_default="256"))
        batch.add_column(sa.Column("max_waiting", sa.Integer, nullable=False, server_default="256"))


def downgrade() -> None:
    with op.batch_alter_table("deployments", recreate="never") as batch:
        batch.drop_column("max_waiting")
        batch.drop_column("prefill_chunk")
