"""The distributed shape on one machine, under crashes: a gateway on Redis Streams with two worker processes, on
SQLite and on PostgreSQL, serving thousands of requests with distinct inputs while its workers are SIGKILLed
one after another. A killed worker's requests are reclaimed and re-run by the other; then the client's answers
are reconciled with the ledger: every request answered 200 and right, each billed exactly once."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from luminal.store.settings import Settings
from tests.billing_reconciliation import Answers, inputs, read_bill, send
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, upload
from tests.scheduler.queue_fixtures import REDIS_URL

REQUESTS = 3000
KILLS = 3
CONCURRENCY = 32


@pytest.fixture
def settings(tmp_path, database_url: str, redis_namespace: str) -> Settings:
    # A dead worker's deliveries are reclaimed after a second idle (the default, 30 s, suits real batches);
    # no deadline can expire meanwhile, so every request is answered.
    return Settings(data_dir=tmp_path / "data", database_url=database_url, bootstrap_key=BOOTSTRAP_KEY,
                    queue_url=REDIS_URL, queue_namespace=redis_namespace, worker_backend="process",
                    reclaim_idle_s=1.0, request_timeout_s=600, max_queue_depth=10_000)  # fmt: skip


def ready_workers(http, deployment_id: int, count: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        workers = http.get(f"/v1/deployments/{deployment_id}/workers").json()["workers"]
        ready = [w for w in workers if w["ready_at"] is not None]
        if len(ready) >= count:
            return ready
        assert time.monotonic() < deadline, f"expected {count} ready workers, have {workers}"
        time.sleep(0.1)


def test_workers_killed_while_serving_bill_each_answered_request_once(server, model_bytes, settings, capsys):
    http = server.client()
    upload(http, "tiny", model_bytes)
    deployment = deploy_and_wait(http, "tiny", min_replicas=2, max_replicas=2, max_batch_size=16,
                                 max_queue_delay_ms=5)  # fmt: skip
    ready_workers(http, deployment["id"], 2)
    answers = Answers([None] * REQUESTS)
    load = threading.Thread(target=send, args=(server.url, inputs(REQUESTS), answers, 0, CONCURRENCY, 300))
    load.start()
    killed = []
    for k in range(KILLS):  # each kill once a further share of the load is answered, on a serving worker
        while answers.done < REQUESTS * (k + 1) // (KILLS + 1) and load.is_alive():
            time.sleep(0.01)
        if not load.is_alive():
            break
        victim = ready_workers(http, deployment["id"], 2)[k % 2]
        os.kill(victim["pid"], signal.SIGKILL)
        killed.append(victim["pid"])
        ready_workers(http, deployment["id"], 2)  # the provisioner replaces it before the next kill
    load.join(timeout=600)
    assert not load.is_alive(), "the load did not finish"

    # Worker processes store usage in Redis with their answers; the gateway's drainer writes it to the database.
    assert server.platform.usage_drainer.flush(timeout=60), "the usage records were not drained"
    bill = read_bill(settings.resolved_database_url)
    with capsys.disabled():
        print(f"\nreconciliation [{server.platform.db.engine.dialect.name}, Redis, worker processes]: "
              f"requests={REQUESTS} answered_200={answers.ok} kills={len(killed)} usage_records={bill.records} "
              f"billed_request_rows={bill.billed_rows} request_ids_in_records={len(bill.request_ids)} "
              f"duplicates={bill.duplicates} wrong_answers={len(answers.wrong)}")  # fmt: skip
    assert len(killed) == KILLS, "the load ended before every kill"
    assert answers.status == [200] * REQUESTS and answers.wrong == [], answers.failures
    assert bill.duplicates == 0
    assert sorted(bill.request_ids) == sorted(answers.request_ids.values())
    assert bill.billed_rows == bill.batch_size_sum == REQUESTS
    assert np.unique(list(answers.request_ids.values())).size == REQUESTS
