"""The billing ledger: one usage record per executed batch.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_records",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("batch_id", sa.String(64), nullable=False, unique=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        # No foreign key: a deployment's billing history stays when the deployment is deleted.
        sa.Column("deployment_id", sa.Integer, nullable=False),
        sa.Column("model_name", sa.String(128), nullable=True),
        sa.Column("model_version", sa.Integer, nullable=True),
        sa.Column("worker_id", sa.String(128), nullable=False),
        sa.Column("gpu_type", sa.String(32), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("batch_size", sa.Integer, nullable=False),
        sa.Column("request_ids", sa.JSON, nullable=False),
        sa.Column("request_rows", sa.JSON, nullable=False),
        sa.Column("price_per_second", sa.Float, nullable=False),
        sa.Column("cost", sa.Float, nullable=False),
    )
    op.create_index("ix_usage_records_tenant_started", "usage_records", ["tenant_id", "started_at"])


def downgrade() -> None:
    op.drop_table("usage_records")
