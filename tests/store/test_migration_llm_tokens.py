"""Migration 0007_llm on SQLite and PostgreSQL: usage records gain prompt_tokens and completion_tokens, 0 for the
records written before; a downgrade removes the columns and keeps the rows."""

from __future__ import annotations

from sqlalchemy import insert, inspect, select, text

from luminal.store.database import Database
from luminal.store.tables import Tenant, UsageRecordRow
from tests.store.test_migration_billed_requests import migrate_to, record


def _columns(db: Database) -> set[str]:
    return {c["name"] for c in inspect(db.engine).get_columns("usage_records")}


def test_usage_records_gain_token_counts(database_url: str):
    db = Database(database_url)
    migrate_to(db, "0006")
    with db.session() as s:
        tenant_id = s.execute(insert(Tenant).values(name="acme").returning(Tenant.id)).scalar_one()
        s.execute(insert(UsageRecordRow.__table__).values(record("b1", tenant_id, ["r1"])))
    migrate_to(db, "0007_llm")
    with db.session() as s:
        tokens = s.execute(select(UsageRecordRow.prompt_tokens, UsageRecordRow.completion_tokens)).all()
    assert [tuple(t) for t in tokens] == [(0, 0)]
    migrate_to(db, "0006", downgrade=True)
    assert {"prompt_tokens", "completion_tokens"}.isdisjoint(_columns(db))
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT batch_id FROM usage_records")).scalars().all() == ["b1"]
    db.dispose()
