"""Several gateways on one database: `leases` (one holder at a time of a named role, such as the provisioner),
`gateway_replicas` (each running gateway's heartbeat) and the replica that owns each prediction.

Revision ID: 0008_replicas
Revises: 0007_llm
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_replicas"
down_revision = "0007_llm"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_table(
        "gateway_replicas",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("beat_at", sa.Float, nullable=False),
    )
    # In place, never by copying the table (see 0006).
    with op.batch_alter_table("predictions", recreate="never") as batch:
        batch.add_column(sa.Column("owner", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("predictions", recreate="never") as batch:
        batch.drop_column("owner")
    op.drop_table("gateway_replicas")
    op.drop_table("leases")
