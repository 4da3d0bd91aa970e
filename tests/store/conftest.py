"""Store tests use the gateway's database fixtures (every store-backed test runs on SQLite and PostgreSQL)."""

from tests.gateway.conftest import database_url, db, model_bytes, postgres_database  # noqa: F401
from tests.store.s3_server import s3_env, s3_server  # noqa: F401, E402
