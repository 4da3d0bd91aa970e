"""API keys gain a name (the owner's label) and a prefix (the key's first characters, to recognise it by).

Keys created before this revision keep NULL for both: only their hash was stored, so no prefix can be recovered.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("name", sa.String(128), nullable=True))
        batch.add_column(sa.Column("prefix", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("prefix")
        batch.drop_column("name")
