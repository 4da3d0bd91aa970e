"""The provisioner's integration tests run the real server of the gateway tests; its lease tests use the gateway's
database fixtures (SQLite and PostgreSQL)."""

from tests.gateway.conftest import database_url, db, model_bytes, postgres_database, server  # noqa: F401
