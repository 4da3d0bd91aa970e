"""Migration 0011_traffic_splits on SQLite and PostgreSQL: the split and trail tables appear empty beside the
models written before, a model's deletion takes its split (the trail stays, no longer pointing at it), and a
downgrade removes both tables and keeps the models."""

from __future__ import annotations

from sqlalchemy import inspect, text

from luminal.store.database import Database
from tests.store.test_migration_billed_requests import migrate_to

TABLES = {"traffic_splits", "traffic_changes"}


def _tables(db: Database) -> set[str]:
    return set(inspect(db.engine).get_table_names())


def test_traffic_tables_come_and_go(database_url: str):
    db = Database(database_url)
    migrate_to(db, "0010_lora_adapters")
    with db.engine.begin() as conn:
        conn.execute(text("INSERT INTO tenants (name) VALUES ('acme')"))
        tenant = conn.execute(text("SELECT id FROM tenants")).scalar_one()
        conn.execute(text("INSERT INTO models (tenant_id, name) VALUES (:t, 'm'), (:t, 'n')"), {"t": tenant})
    assert TABLES.isdisjoint(_tables(db))
    migrate_to(db, "0011_traffic_splits")
    with db.engine.begin() as conn:
        models = dict(conn.execute(text("SELECT name, id FROM models")).all())
        for name in ("m", "n"):
            conn.execute(
                text("INSERT INTO traffic_splits (model_id, tenant_id, split) VALUES (:m, :t, :s)"),
                {"m": models[name], "t": tenant, "s": '{"1": 100}'},
            )
        conn.execute(
            text(
                "INSERT INTO traffic_changes (tenant_id, model_id, model_name, action, new_split)"
                " VALUES (:t, :m, 'm', 'set', :s)"
            ),
            {"t": tenant, "m": models["m"], "s": '{"1": 100}'},
        )
        conn.execute(text("DELETE FROM models WHERE name = 'm'"))
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT model_id FROM traffic_splits")).scalars().all() == [models["n"]]
        assert conn.execute(text("SELECT model_name, model_id FROM traffic_changes")).one() == ("m", None)
    migrate_to(db, "0010_lora_adapters", downgrade=True)
    assert TABLES.isdisjoint(_tables(db))
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT name FROM models")).scalars().all() == ["n"]
    db.dispose()
