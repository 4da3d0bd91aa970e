"""The first schema: tenants, API keys, models, model versions, deployments.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _created_at() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        _created_at(),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        _created_at(),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    op.create_table(
        "models",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        _created_at(),
        sa.UniqueConstraint("tenant_id", "name"),
    )
    op.create_index("ix_models_tenant_id", "models", ["tenant_id"])
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("model_id", sa.Integer, sa.ForeignKey("models.id", ondelete="CASCADE"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("artifact_key", sa.String(256), nullable=False),
        sa.Column("signature", sa.JSON, nullable=False),
        sa.Column("symbols", sa.JSON, nullable=False),
        _created_at(),
        sa.UniqueConstraint("model_id", "version"),
        sa.UniqueConstraint("model_id", "sha256"),
    )
    op.create_index("ix_model_versions_model_id", "model_versions", ["model_id"])
    op.create_index("ix_model_versions_sha256", "model_versions", ["sha256"])
    op.create_table(
        "deployments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column(
            "model_version_id", sa.Integer, sa.ForeignKey("model_versions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("gpu_type", sa.String(32), nullable=False),
        sa.Column("target", sa.String(32), nullable=False),
        sa.Column("max_batch_size", sa.Integer, nullable=False),
        sa.Column("max_queue_delay_ms", sa.Integer, nullable=False),
        sa.Column("min_replicas", sa.Integer, nullable=False),
        sa.Column("max_replicas", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("program_key", sa.String(256), nullable=True),
        _created_at(),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_deployments_tenant_id", "deployments", ["tenant_id"])
    op.create_index("ix_deployments_model_version_id", "deployments", ["model_version_id"], unique=True)


def downgrade() -> None:
    for table in ("deployments", "model_versions", "models", "api_keys", "tenants"):
        op.drop_table(table)
