"""Usage records carry a language model's tokens beside its seconds: prompt_tokens and completion_tokens, 0 for
the tensor batches billed before (and after) them.

Revision ID: 0007_llm
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_llm"
down_revision = "0006"
branch_labels = None
depends_on = None


# In place, never by copying the table (see 0006): SQLite 3.35+ and PostgreSQL add and drop columns directly.
def upgrade() -> None:
    with op.batch_alter_table("usage_records", recreate="never") as batch:
        batch.add_column(sa.Column("prompt_tokens", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("completion_tokens", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("usage_records", recreate="never") as batch:
        batch.drop_column("completion_tokens")
        batch.drop_column("prompt_tokens")
