"""Billing becomes idempotent per request: `billed_requests` holds each billed request id once.

Existing records are indexed as they are: each request id points at the first record that billed it. Records
that billed a request twice before this revision (a reclaimed request re-run by another worker) are left as
they were: history is not rewritten by a migration.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

BACKFILL_CHUNK = 1000  # rows per insert: bounded statements however long the billing history


def upgrade() -> None:
    billed = op.create_table(
        "billed_requests",
        sa.Column("request_id", sa.String(64), primary_key=True),
        sa.Column("usage_record_id", sa.Integer, sa.ForeignKey("usage_records.id", ondelete="CASCADE"), nullable=False),
    )
    op.create_index("ix_billed_requests_usage_record_id", "billed_requests", ["usage_record_id"])
    _backfill(billed)


def _backfill(billed: sa.Table) -> None:
    records = sa.table("usage_records", sa.column("id", sa.Integer), sa.column("request_ids", sa.JSON))
    connection = op.get_bind()
    seen: set[str] = set()
    chunk: list[dict] = []
    for record_id, request_ids in connection.execute(sa.select(records.c.id, records.c.request_ids).order_by("id")):
        for request_id in request_ids or []:
            if request_id not in seen:
                seen.add(request_id)
                chunk.append({"request_id": request_id, "usage_record_id": record_id})
        if len(chunk) >= BACKFILL_CHUNK:
            connection.execute(billed.insert(), chunk)
            chunk = []
    if chunk:
        connection.execute(billed.insert(), chunk)


def downgrade() -> None:
    op.drop_table("billed_requests")
