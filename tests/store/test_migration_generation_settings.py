"""Migration 0009_generation_settings on SQLite and PostgreSQL: deployments gain prefill_chunk and max_waiting,
the engine's former defaults (256 each) for the rows written before; a downgrade removes the columns and keeps
the rows."""

from __future__ import annotations

from sqlalchemy import inspect, text

from luminal.store.database import Database
from tests.store.test_migration_billed_requests import migrate_to

SETTINGS = {"prefill_chunk", "max_waiting"}


def _columns(db: Database) -> set[str]:
    return {c["name"] for c in inspect(db.engine).get_columns("deployments")}


def test_deployments_gain_generation_settings(database_url: str):
    db = Database(database_url)
    migrate_to(db, "0008_replicas")
    with db.engine.begin() as conn:
        conn.execute(text("INSERT INTO tenants (name) VALUES ('acme')"))
        tenant = conn.execute(text("SELECT id FROM tenants")).scalar_one()
        conn.execute(text("INSERT INTO models (tenant_id, name) VALUES (:t, 'm')"), {"t": tenant})
        model = conn.execute(text("SELECT id FROM models")).scalar_one()
        conn.execute(
            text(
                "INSERT INTO model_versions (model_id, version, sha256, size_bytes, artifact_key, signature, symbols)"
                " VALUES (:m, 1, 'x', 1, 'k', '{}', '{}')"
            ),
            {"m": model},
        )
        version = conn.execute(text("SELECT id FROM model_versions")).scalar_one()
        conn.execute(
            text(
                "INSERT INTO deployments (tenant_id, model_version_id, gpu_type, target, max_batch_size,"
                " max_queue_delay_ms, min_replicas, max_replicas, status)"
                " VALUES (:t, :v, 'cpu', 'cpu', 8, 5, 0, 1, 'ready')"
            ),
            {"t": tenant, "v": version},
        )
    migrate_to(db, "0009_generation_settings")
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT prefill_chunk, max_waiting FROM deployments")).all()
    assert [tuple(r) for r in rows] == [(256, 256)]
    migrate_to(db, "0008_replicas", downgrade=True)
    assert SETTINGS.isdisjoint(_columns(db))
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT status FROM deployments")).scalars().all() == ["ready"]
    db.dispose()
