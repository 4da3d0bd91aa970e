"""Asynchronous predictions.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "predictions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("deployment_id", sa.Integer, sa.ForeignKey("deployments.id", ondelete="SET NULL"), nullable=True),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("billed_seconds", sa.Float, nullable=False),
        sa.Column("output", sa.Text, nullable=True),
        sa.Column("output_key", sa.String(64), nullable=True),
        sa.Column("webhook_url", sa.String(2048), nullable=True),
        sa.Column("webhook_status", sa.String(16), nullable=True),
        sa.Column("webhook_error", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_predictions_tenant_created", "predictions", ["tenant_id", "created_at"])
    op.create_index("ix_predictions_status", "predictions", ["status"])


def downgrade() -> None:
    op.drop_table("predictions")
