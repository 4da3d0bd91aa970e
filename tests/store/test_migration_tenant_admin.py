"""Migration 0006 (tenant suspensions and quotas), up and down on SQLite and PostgreSQL, keeps every row that
belongs to a tenant: the columns are altered in place, never by copying the `tenants` table (dropping it would
cascade to the tenant's keys, models and deployments)."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from luminal.store.database import Database, alembic_config

QUOTA_COLUMNS = {"suspended_at", "suspension_reason", "max_deployments", "max_replicas", "max_requests_per_second"}


def test_up_and_down_keep_the_tenants_rows(database_url: str):
    db = Database(database_url)
    cfg = alembic_config(database_url)

    def to(step, revision: str) -> None:
        with db.engine.begin() as connection:
            cfg.attributes["connection"] = connection
            step(cfg, revision)

    def count_keys() -> int:
        with db.engine.begin() as connection:
            return connection.execute(text("SELECT count(*) FROM api_keys")).scalar()

    try:
        to(command.upgrade, "0004")
        with db.engine.begin() as connection:
            connection.execute(text("INSERT INTO tenants (id, name) VALUES (1, 'a')"))
            connection.execute(text("INSERT INTO api_keys (tenant_id, key_hash) VALUES (1, 'h')"))
        to(command.upgrade, "0006")
        assert QUOTA_COLUMNS <= {c["name"] for c in inspect(db.engine).get_columns("tenants")}
        assert count_keys() == 1
        to(command.downgrade, "0004")
        assert not QUOTA_COLUMNS & {c["name"] for c in inspect(db.engine).get_columns("tenants")}
        assert count_keys() == 1
    finally:
        db.dispose()
