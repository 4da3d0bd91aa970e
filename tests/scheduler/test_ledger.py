"""SqlUsageLedger on SQLite and PostgreSQL: each batch billed exactly once (retries and racing writers
included), shares summing to the batch time, the model snapshot, and the tenant foreign key."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import delete

from luminal.scheduler.ledger import LedgerError, SqlUsageLedger
from luminal.store import deployments as deployment_store
from luminal.store.tables import Tenant
from tests.scheduler.ledger_world import PRICES, rows, usage


def test_a_record_is_written_once_with_its_price_and_model(world):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    record = usage(tenant_id, deployment_id)
    assert ledger.record(record) is True
    # A retry, even one carrying other numbers, changes nothing: the first write of a batch is its bill.
    assert ledger.record(record) is False
    assert ledger.record(usage(tenant_id, deployment_id, batch_id=record.batch_id, ended_at=1_700_000_099.0)) is False
    [row] = rows(db)
    assert (row.batch_id, row.tenant_id, row.deployment_id) == (record.batch_id, tenant_id, deployment_id)
    assert (row.model_name, row.model_version, row.gpu_type, row.worker_id) == ("tiny", 1, "h100", "worker-1")
    assert (row.seconds, row.batch_size, row.price_per_second, row.cost) == (1.5, 3, 2.0, 3.0)
    assert (row.request_ids, row.request_rows) == (["r1", "r2", "r3"], [1, 4, 3])


def test_racing_writers_of_one_batch_leave_one_row(world):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    record = usage(tenant_id, deployment_id)
    results: list[bool] = []
    start = threading.Barrier(6)

    def write() -> None:
        start.wait()
        results.append(ledger.record(record))

    threads = [threading.Thread(target=write) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]
    assert len(rows(db)) == 1


def test_shares_sum_to_the_batch_time_and_follow_the_rows(world):
    db, tenant_id, deployment_id = world
    record = usage(tenant_id, deployment_id)
    shares = record.shares()
    assert sum(shares.values()) == pytest.approx(record.seconds) == pytest.approx(1.5)
    assert shares == pytest.approx({"r1": 1.5 / 8, "r2": 1.5 * 4 / 8, "r3": 1.5 * 3 / 8})
    SqlUsageLedger(db, PRICES).record(record)
    [row] = rows(db)
    assert row.seconds == pytest.approx(row.ended_at - row.started_at)


def test_the_model_snapshot_outlives_the_deployment(world):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    ledger.record(usage(tenant_id, deployment_id, request_ids=("a1", "a2", "a3")))
    with db.session() as s:
        tenant = s.get(Tenant, tenant_id)
        deployment_store.delete_deployment(s, tenant, deployment_id)
    # Billed after the deletion: no model to look up, unless the worker carried it in the record.
    ledger.record(usage(tenant_id, deployment_id, request_ids=("b1", "b2", "b3")))
    ledger.record(usage(tenant_id, deployment_id, request_ids=("c1", "c2", "c3"), model_name="tiny", model_version=1))
    assert [(r.deployment_id, r.model_name, r.model_version) for r in rows(db)] == [
        (deployment_id, "tiny", 1),
        (deployment_id, None, None),
        (deployment_id, "tiny", 1),
    ]


def test_an_unknown_tenant_is_refused_and_a_deleted_tenant_takes_its_records(world):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    with pytest.raises(LedgerError, match="tenant 9999 does not exist"):
        ledger.record(usage(9999, deployment_id))
    assert rows(db) == []
    ledger.record(usage(tenant_id, deployment_id))
    with db.session() as s:
        s.execute(delete(Tenant).where(Tenant.id == tenant_id))
    assert rows(db) == []


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(batch_id=""), "batch_id must be 1 to 64 characters"),
        (dict(batch_id="x" * 65), "batch_id must be 1 to 64 characters"),
        (dict(ended_at=1_699_999_999.0), "ended .* before it started"),
        (dict(started_at=float("nan")), "must be epoch seconds"),
        (dict(request_rows=(1, 2)), "3 request ids but 2 row counts"),
        (dict(request_ids=(), request_rows=()), "at least one request"),
        (dict(request_rows=(1, -1, 2)), "non-negative integers"),
        (dict(gpu_type="tpu"), "no price for GPU type 'tpu'"),
    ],
)
def test_records_that_cannot_be_billed_are_refused_by_name(world, changes, message):
    db, tenant_id, deployment_id = world
    with pytest.raises(LedgerError, match=message):
        SqlUsageLedger(db, PRICES).record(usage(tenant_id, deployment_id, **changes))
    assert rows(db) == []
