"""Traffic splits: a model's requests without a version shared among its ready versions by percent, and the
append-only trail of every change to a split (who, when, from what to what), which rollbacks read.

Revision ID: 0011_traffic_splits
Revises: 0010_lora_adapters
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_traffic_splits"
down_revision = "0010_lora_adapters"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "traffic_splits",
        sa.Column("model_id", sa.Integer, sa.ForeignKey("models.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("split", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_traffic_splits_tenant_id", "traffic_splits", ["tenant_id"])
    op.create_table(
        "traffic_changes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("model_id", sa.Integer, sa.ForeignKey("models.id", ondelete="SET NULL"), nullable=True),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("old_split", sa.JSON, nullable=True),
        sa.Column("new_split", sa.JSON, nullable=True),
        sa.Column("api_key_id", sa.Integer, nullable=True),
        sa.Column("api_key_name", sa.String(128), nullable=True),
        sa.Column("changed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_traffic_changes_tenant_id", "traffic_changes", ["tenant_id"])
    op.create_index("ix_traffic_changes_model", "traffic_changes", ["model_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_traffic_changes_model", "traffic_changes")
    op.drop_index("ix_traffic_changes_tenant_id", "traffic_changes")
    op.drop_table("traffic_changes")
    op.drop_index("ix_traffic_splits_tenant_id", "traffic_splits")
    op.drop_table("traffic_splits")
