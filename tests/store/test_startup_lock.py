"""Gateways starting at once on one fresh PostgreSQL database: under the startup lock both migrate and bootstrap,
one creating the first tenant and the other finding it, and neither start fails."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

from luminal.store.database import Database, migrate
from luminal.store.leases import startup_lock
from luminal.store.tables import Tenant
from luminal.store.tenants import ensure_bootstrap_tenant

KEY = "lm_startup_lock_test_key_0123456789"


def test_gateways_starting_together_migrate_and_bootstrap_one_at_a_time(database_url: str):
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite is one file on one host: no lock is taken")
    barrier = threading.Barrier(3)
    keys: list[str | None] = []
    errors: list[BaseException] = []

    def start() -> None:
        db = Database(database_url)
        try:
            barrier.wait()
            with startup_lock(db.engine):
                migrate(db.engine)
                with db.session() as session:
                    keys.append(ensure_bootstrap_tenant(session, KEY))
        except BaseException as e:  # reported below: a failed start is the defect this lock prevents
            errors.append(e)
        finally:
            db.dispose()

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert keys.count(KEY) == 1 and keys.count(None) == 2, keys
    db = Database(database_url)
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Tenant)) == 1
    db.dispose()
