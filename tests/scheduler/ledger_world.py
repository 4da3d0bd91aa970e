"""A ledger's world for the billing tests: a migrated database (SQLite and PostgreSQL) with one tenant whose model
is deployed, a usage record maker and a reader of the rows written."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from luminal.scheduler.billing import UsageRecord
from luminal.store import deployments as deployment_store
from luminal.store import models as model_store
from luminal.store.database import Database, migrate
from luminal.store.models import UploadedGraph
from luminal.store.tables import UsageRecordRow
from luminal.store.tenants import create_tenant

PRICES = {"cpu": 0.5, "h100": 2.0}
SIGNATURE = {"inputs": [{"name": "x", "shape": [4], "dtype": "float32"}], "outputs": []}


@pytest.fixture
def world(database_url: str):
    """A migrated database with tenant `acme` whose model `tiny` version 1 is deployed."""
    db = Database(database_url)
    migrate(db.engine)
    spec = deployment_store.DeploymentSpec("tiny", None, "h100", "cpu", 8, 5, 0, 1)
    with db.session() as s:
        tenant, _ = create_tenant(s, "acme")
        model_store.add_version(s, tenant, "tiny", UploadedGraph("ab" * 32, 10, "k", SIGNATURE, {}))
        deployment_id = deployment_store.create_deployment(s, tenant, spec).id
    yield db, tenant.id, deployment_id
    db.dispose()


def usage(tenant_id: int, deployment_id: int, **changes) -> UsageRecord:
    fields = dict(
        batch_id=uuid.uuid4().hex,
        deployment_id=deployment_id,
        tenant_id=tenant_id,
        worker_id="worker-1",
        gpu_type="h100",
        started_at=1_700_000_000.25,
        ended_at=1_700_000_001.75,
        request_ids=("r1", "r2", "r3"),
        request_rows=(1, 4, 3),
    )
    return UsageRecord(**{**fields, **changes})


def rows(db: Database) -> list[UsageRecordRow]:
    with db.session() as s:
        return list(s.scalars(select(UsageRecordRow).order_by(UsageRecordRow.id)))
