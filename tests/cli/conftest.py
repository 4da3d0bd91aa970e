"""The CLI tests talk to the same real server the gateway tests use (SQLite and PostgreSQL)."""

from tests.gateway.conftest import database_url, model_bytes, postgres_database, server, settings  # noqa: F401
