"""Tenants gain a suspension (when, and the operator's reason) and quotas: deployments, replicas across their
deployments, and requests per second. NULL quotas mean no limit, so existing tenants keep working as before.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


# Never by copying the table (batch mode's way on SQLite when it cannot alter in place): dropping the old
# `tenants` would cascade to every row that references a tenant. SQLite (3.35+) and PostgreSQL both add and drop
# these columns in place.
def upgrade() -> None:
    with op.batch_alter_table("tenants", recreate="never") as batch:
        batch.add_column(sa.Column("suspended_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("suspension_reason", sa.String(256), nullable=True))
        batch.add_column(sa.Column("max_deployments", sa.Integer, nullable=True))
        batch.add_column(sa.Column("max_replicas", sa.Integer, nullable=True))
        batch.add_column(sa.Column("max_requests_per_second", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants", recreate="never") as batch:
        for column in (
            "max_requests_per_second",
            "max_replicas",
            "max_deployments",
            "suspension_reason",
            "suspended_at",
        ):
            batch.drop_column(column)
