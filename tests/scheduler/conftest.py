"""Compile-job tests use the gateway's store fixtures (SQLite and PostgreSQL)."""

from tests.gateway.conftest import database_url, model_bytes, postgres_database, server, settings  # noqa: F401
