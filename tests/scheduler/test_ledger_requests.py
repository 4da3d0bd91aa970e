"""Billing idempotent per request, on SQLite and PostgreSQL: a request billed by one batch is never billed by
another (a reclaimed request re-run by a second worker arrives in a new batch), a mixed batch bills only its new
requests with their shares, racing batches over the same requests bill each once, and reports stay consistent."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import delete, func, select

from luminal.scheduler.ledger import LedgerError, SqlUsageLedger
from luminal.store.tables import BilledRequest, Tenant, UsageRecordRow
from luminal.store.usage import usage_totals
from tests.scheduler.ledger_world import PRICES, rows, usage


def billed(db) -> dict[str, int]:
    """request id -> the id of the usage record that billed it."""
    with db.session() as s:
        return dict(s.execute(select(BilledRequest.request_id, BilledRequest.usage_record_id)).all())


def test_a_rerun_of_billed_requests_bills_nothing_and_writes_no_row(world):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    assert ledger.record(usage(tenant_id, deployment_id)) is True
    # The same requests re-run by another worker: a new batch id, and nothing billed.
    assert ledger.record(usage(tenant_id, deployment_id, worker_id="worker-2")) is False
    [row] = rows(db)
    assert row.worker_id == "worker-1"
    assert billed(db) == {"r1": row.id, "r2": row.id, "r3": row.id}


def test_a_mixed_batch_bills_only_its_new_requests_with_their_shares(world):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    ledger.record(usage(tenant_id, deployment_id, request_ids=("r1",), request_rows=(2,)))
    # r1 (billed above) rode along with two new requests: rows 1, 4, 3 of 8 over 1.5 s.
    assert ledger.record(usage(tenant_id, deployment_id)) is True
    first, second = rows(db)
    assert (second.request_ids, second.request_rows, second.batch_size) == (["r2", "r3"], [4, 3], 2)
    assert second.seconds == pytest.approx(1.5 * 7 / 8)
    assert second.cost == pytest.approx(1.5 * 7 / 8 * PRICES["h100"])
    assert billed(db) == {"r1": first.id, "r2": second.id, "r3": second.id}
    with db.session() as s:
        totals = usage_totals(s, tenant_id, 0, 2e9)
    assert (totals.requests, totals.batches) == (3, 2)
    assert totals.gpu_seconds == pytest.approx(1.5 + 1.5 * 7 / 8)


def test_racing_batches_over_the_same_requests_bill_each_request_once(world):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    requests = [f"q{i}" for i in range(12)]
    # Six batches (as six workers re-running reclaimed work), each over an overlapping window of the requests.
    batches = [tuple(requests[i : i + 6]) for i in range(0, 12, 2)][:6]
    start = threading.Barrier(len(batches))
    errors: list[BaseException] = []

    def write(ids: tuple[str, ...]) -> None:
        start.wait()
        try:
            ledger.record(usage(tenant_id, deployment_id, request_ids=ids, request_rows=(1,) * len(ids)))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(ids,)) for ids in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ids = [rid for row in rows(db) for rid in row.request_ids]
    assert sorted(ids) == sorted(set(ids)) == sorted(requests)
    assert sorted(billed(db)) == sorted(requests)
    assert all(row.batch_size == len(row.request_ids) > 0 for row in rows(db))


def test_a_record_naming_a_request_twice_is_refused(world):
    db, tenant_id, deployment_id = world
    with pytest.raises(LedgerError, match="a request id appears twice"):
        SqlUsageLedger(db, PRICES).record(usage(tenant_id, deployment_id, request_ids=("r1", "r2", "r1")))
    with pytest.raises(LedgerError, match="request ids must be 1 to 64 characters"):
        SqlUsageLedger(db, PRICES).record(usage(tenant_id, deployment_id, request_ids=("r1", "", "r3")))
    assert rows(db) == [] and billed(db) == {}


def test_a_deleted_tenant_takes_its_billed_requests(world):
    db, tenant_id, deployment_id = world
    SqlUsageLedger(db, PRICES).record(usage(tenant_id, deployment_id, batch_id=uuid.uuid4().hex))
    with db.session() as s:
        s.execute(delete(Tenant).where(Tenant.id == tenant_id))
    with db.session() as s:
        assert s.scalar(select(func.count()).select_from(BilledRequest)) == 0
        assert s.scalar(select(func.count()).select_from(UsageRecordRow)) == 0


def test_records_written_together_bill_as_written_one_by_one(world):
    # A drainer's transaction: a request in two records (a re-run drained with the first run), a record seen
    # twice (claimed again after a drainer died), and a record whose requests were all billed before.
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    ledger.record(usage(tenant_id, deployment_id, request_ids=("old",), request_rows=(1,)))
    first = usage(tenant_id, deployment_id, request_ids=("a", "b"), request_rows=(1, 1))
    rerun = usage(tenant_id, deployment_id, request_ids=("b", "c"), request_rows=(1, 3))
    stale = usage(tenant_id, deployment_id, request_ids=("old",), request_rows=(1,))
    assert ledger.record_many([first, rerun, first, stale]) == [True, True, False, False]
    by_batch = {row.batch_id: row for row in rows(db)}
    assert stale.batch_id not in by_batch
    assert by_batch[first.batch_id].request_ids == ["a", "b"]
    assert (by_batch[rerun.batch_id].request_ids, by_batch[rerun.batch_id].batch_size) == (["c"], 1)
    assert by_batch[rerun.batch_id].seconds == pytest.approx(1.5 * 3 / 4)
    assert billed(db) == {
        "old": billed(db)["old"],
        "a": by_batch[first.batch_id].id,
        "b": by_batch[first.batch_id].id,
        "c": by_batch[rerun.batch_id].id,
    }
