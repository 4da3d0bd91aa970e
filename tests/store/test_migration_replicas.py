"""Migration 0008_replicas on SQLite and PostgreSQL: predictions gain an owner (NULL for those written before),
the lease and replica tables appear; a downgrade removes them and keeps the predictions."""

from __future__ import annotations

from sqlalchemy import insert, inspect, select, text

from luminal.store.database import Database
from luminal.store.tables import Prediction, Tenant
from tests.store.test_migration_billed_requests import migrate_to


def test_predictions_gain_an_owner_and_the_replica_tables_appear(database_url: str):
    db = Database(database_url)
    migrate_to(db, "0007_llm")
    with db.session() as s:
        tenant_id = s.execute(insert(Tenant).values(name="acme").returning(Tenant.id)).scalar_one()
        s.execute(
            insert(Prediction.__table__).values(
                id="p1", tenant_id=tenant_id, model="m", version=1, status="running", billed_seconds=0.0
            )
        )
    migrate_to(db, "0008_replicas")
    assert {"leases", "gateway_replicas"} <= set(inspect(db.engine).get_table_names())
    with db.session() as s:
        assert s.execute(select(Prediction.id, Prediction.owner)).all() == [("p1", None)]
    migrate_to(db, "0007_llm", downgrade=True)
    assert {"leases", "gateway_replicas"}.isdisjoint(inspect(db.engine).get_table_names())
    assert "owner" not in {c["name"] for c in inspect(db.engine).get_columns("predictions")}
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT id FROM predictions")).scalars().all() == ["p1"]
    db.dispose()
