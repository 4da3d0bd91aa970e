"""Store tests use the gateway's database fixtures (every store-backed test runs on SQLite and PostgreSQL)."""

from tests.gateway.conftest import database_url, db, model_bytes, postgres_database  # noqa: F401
