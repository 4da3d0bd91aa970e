"""LoRA adapters added to a live language-model deployment (luminal/lora_package.py's factors, stored as an
artifact): each a model name of its tenant, served by the deployment's workers beside the adapters its package
carries.

Revision ID: 0010_lora_adapters
Revises: 0009_generation_settings
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_lora_adapters"
down_revision = "0009_generation_settings"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lora_adapters",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("deployment_id", sa.Integer, sa.ForeignKey("deployments.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("artifact_key", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.UniqueConstraint("tenant_id", "name", name="uq_lora_adapters_tenant_name"),
    )
    op.create_index("ix_lora_adapters_deployment_id", "lora_adapters", ["deployment_id"])


def downgrade() -> None:
    op.drop_index("ix_lora_adapters_deployment_id", "lora_adapters")
    op.drop_table("lora_adapters")
