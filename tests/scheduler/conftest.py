"""Compile-job and ledger tests use the metadata store's fixtures (SQLite and PostgreSQL) of tests/gateway."""

from tests.gateway.conftest import database_url, model_bytes, postgres_database, server, settings  # noqa: F401

# The billing ledger's tests share a database holding one deployed tenant.
from tests.scheduler.ledger_world import world  # noqa: F401

# Request queues and the worker registry: each test runs on the in-memory backend and on Redis.
from tests.scheduler.queue_fixtures import (  # noqa: F401
    gateway_loop,
    queue,
    queue_factory,
    redis_namespace,
    registry,
    wait,
)
