"""The platform scaled out on one machine, under crashes: two `luminal serve` gateways (data directories of their
own, as on two hosts), a Celery compile worker and the worker processes of the provisioner, on PostgreSQL, Redis
and an S3 server (`rclone serve s3`), each a separate process. A model is uploaded and deployed through gateway A,
then requests with distinct inputs go to both gateways at once while a worker process, the compile worker (in
the middle of a second deployment's compile) and gateway A (the provisioner lease's holder) are SIGKILLed in
turn (A's worker processes stop with it). Then the client's outcomes are reconciled with the ledger.

What must hold: every request is answered 200 and right, or refused with a retryable status and the OIP error
(429/503/504), or was in flight on the killed gateway's connections (cut off: it may have been executed and
billed, once, but the client cannot get its answer from a dead connection); nothing is billed twice; every
answered request is billed; nothing is left in the queue; the second deployment ends ready and answers; gateway B
takes over the provisioner.

Not tested: separate network namespaces. Without root this machine lets a process create one (user namespaces
are enabled) but not connect it to the host's: a veth pair into the host namespace needs CAP_NET_ADMIN there,
neither slirp4netns nor pasta is installed, and PostgreSQL and Redis listen on 127.0.0.1 only. (These sessions run
as root and could wire namespaces, but `make test` must not need root.) So the processes share the loopback
interface; each still reaches the others only through PostgreSQL, Redis, S3 and HTTP, as across hosts.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import numpy as np
import pytest
import redis

import luminal as lm
from luminal.scheduler.compile_tasks import TEST_HOLD_ENV
from luminal.scheduler.queues import open_queue
from luminal.scheduler.queues.redis_streams import usage_stream
from luminal.store.database import Database
from luminal.store.leases import PROVISIONER, holder_of
from tests.billing_reconciliation import read_bill
from tests.gateway.conftest import _fresh_postgres_schema, tiny_graph, upload
from tests.scaleout.cluster import (
    CompileWorker,
    Shared,
    close_all,
    deploy,
    ready_workers,
    running,
    start_platform,
    wait_for,
)
from tests.scaleout.load import CUT_OFF, RETRYABLE, Load
from tests.scheduler.queue_fixtures import REDIS_URL
from tests.store.s3_server import BUCKET, aws_environment

pytest.importorskip("celery")
CONCURRENCY = 16
ANSWERS_BETWEEN_KILLS = 150  # answers the load must gather before each kill, and after the last
BOOTSTRAP_KEY = "lm_scaleout-bootstrap-key-0123456789ab"


@pytest.fixture
def shared(postgres_database: str, redis_namespace: str, s3_server, tmp_path) -> Shared:
    _fresh_postgres_schema(postgres_database)
    extra = {
        **aws_environment(s3_server.endpoint),
        "LUMINAL_WEBHOOK_SECRET": "scaleout-webhook-secret-0123456789",  # replicas without a shared data_dir
        # A killed compile worker's task comes back after 2 s, a killed worker's deliveries after 1 s idle.
        "LUMINAL_COMPILE_VISIBILITY_TIMEOUT_S": "2",
        "LUMINAL_RECLAIM_IDLE_S": "1",
        # Generous deadlines: on a loaded machine a request may wait long, and must still be answered.
        "LUMINAL_REQUEST_TIMEOUT_S": "120",
        "LUMINAL_MAX_QUEUE_DEPTH": "10000",
    }
    artifact_url = f"s3://{BUCKET}/{redis_namespace}"
    return Shared(postgres_database, REDIS_URL, redis_namespace, artifact_url, BOOTSTRAP_KEY, extra)


@pytest.fixture
def processes():
    started = []
    yield started
    close_all(started)


def lease_holder(database_url: str) -> str | None:
    db = Database(database_url)
    try:
        with db.session() as session:
            return holder_of(session, PROVISIONER, time.time())
    finally:
        db.dispose()


def one_request(rows: np.ndarray) -> dict:
    return {"inputs": [{"name": "x", "shape": list(rows.shape), "datatype": "FP32", "data": rows.ravel().tolist()}]}


def test_gateways_workers_and_compile_worker_killed_under_load(shared, processes, model_bytes, tmp_path, capsys):
    started_at = time.monotonic()
    hold = tmp_path / "hold"
    hold.mkdir()
    a, b = start_platform(shared, tmp_path, processes, **{TEST_HOLD_ENV: str(hold)})
    compiler = processes[0]
    wait_for(lambda: lease_holder(shared.database_url) == "gw-a", "gateway A to take the provisioner lease", 60)
    first = deploy(a, "tiny", model_bytes, replicas=2)
    with a.client() as http:
        assert upload(http, "tiny2", model_bytes).status_code == 201

    load = Load({"gw-a": a.url, "gw-b": b.url}, BOOTSTRAP_KEY, "tiny", CONCURRENCY).start()
    try:
        with b.client() as http:
            # 1. A worker process, while it serves.
            wait_for(lambda: load.answered() >= ANSWERS_BETWEEN_KILLS, "the first answers", 180)
            victim = ready_workers(http, first["id"])[0]["pid"]
            os.kill(victim, signal.SIGKILL)
            wait_for(lambda: (pids := {w["pid"] for w in ready_workers(http, first["id"])}) and victim not in pids
                     and len(pids) == 2, "the provisioner to replace the killed worker")  # fmt: skip

            # 2. The compile worker, in the middle of the second deployment's compile; another one starts.
            mark = load.answered()
            wait_for(lambda: load.answered() >= mark + ANSWERS_BETWEEN_KILLS, "answers after the worker's death", 180)
            (hold / "hold").touch()
            created = http.post("/v1/deployments", json={"model": "tiny2", "min_replicas": 1, "max_replicas": 1})
            assert created.status_code == 202, created.text
            second_id = created.json()["id"]
            wait_for(lambda: list(hold.glob(f"started-{second_id}-*")), "the compile worker to take the compile")
            compiler.kill_group()
            (hold / "hold").unlink()
            assert http.get(f"/v1/deployments/{second_id}").json()["status"] == "compiling"
            processes.append(CompileWorker(shared, tmp_path, "compile-2", **{TEST_HOLD_ENV: str(hold)}))

            # 3. Gateway A, the provisioner lease's holder, with requests in flight on its connections.
            mark = load.answered()
            wait_for(lambda: load.answered() >= mark + ANSWERS_BETWEEN_KILLS, "answers after the compile kill", 180)
            started_by_a = {w["pid"] for w in ready_workers(http, first["id"])}
            killed_at = time.monotonic()
            a.kill()
            wait_for(lambda: lease_holder(shared.database_url) == "gw-b", "gateway B to take the lease", 90)
            # A's worker processes stop with it (no other provisioner could ever scale them down).
            wait_for(lambda: not any(running(pid) for pid in started_by_a), "gateway A's workers to stop", 120)

            second = wait_for(lambda: (d := http.get(f"/v1/deployments/{second_id}").json())["status"] != "compiling"
                              and d, "the second deployment's compile to finish", 180)  # fmt: skip
            assert (second["status"], second["error"]) == ("ready", None)
            x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
            answer = http.post("/v2/models/tiny2/infer", json=one_request(x), timeout=180)
            assert answer.status_code == 200, answer.text
            expected = lm.run(tiny_graph(), {"x": x})["probs"]
            np.testing.assert_allclose(answer.json()["outputs"][0]["data"], expected.ravel(), rtol=1e-5, atol=1e-6)
            second_answer = answer.headers["Luminal-Request-Id"]

            mark = load.answered("gw-b")
            wait_for(lambda: load.answered("gw-b") >= mark + ANSWERS_BETWEEN_KILLS, "answers after A's death", 180)
    finally:
        load.stop()
    # Nothing stranded in the queue: every request a gateway accepted was taken by a worker and acknowledged
    # (those a kill cut off too), none is waiting or held by a dead worker.
    queue = open_queue(shared.queue_url, shared.namespace)
    try:
        wait_for(lambda: (queue.depth(first["id"]), queue.in_flight(first["id"])) == (0, 0), "the queue to drain", 120)
    finally:
        queue.close()
    # Workers store usage in Redis with their answers; B's drainer writes it to the database (and claims, after
    # its idle timeout, what A's drainer held when it was killed).
    usage = redis.Redis.from_url(shared.queue_url)
    try:
        wait_for(lambda: usage.xlen(usage_stream(shared.namespace)) == 0, "the usage records to be drained", 120)
    finally:
        usage.close()

    outcomes = list(load.outcomes.values())
    statuses = load.statuses()
    answers = [o for o in outcomes if o.status == 200]
    refusals = [o for o in outcomes if o.status in RETRYABLE]
    cut_off = [o for o in outcomes if o.status == CUT_OFF]
    answered_ids = {o.request_id for o in answers} | {second_answer}
    bill = read_bill(shared.database_url)
    billed = set(bill.request_ids)
    with capsys.disabled():
        print(f"\nscale-out [2 gateways, Celery compile worker, worker processes, PostgreSQL, Redis, S3]: "
              f"requests={len(outcomes)} statuses={dict(statuses)} rerouted_from_dead_gateway={load.rerouted} "
              f"kills=worker,compile-worker,gateway-a answered_by_a={load.answered('gw-a')} "
              f"answered_by_b={load.answered('gw-b')} usage_records={bill.records} billed={len(billed)} "
              f"duplicates={bill.duplicates} billed_but_cut_off={len(billed - answered_ids)} "
              f"cut_off_by={dict(Counter(o.error.split('(')[0] for o in cut_off))} "
              f"wrong={sum(not o.right for o in answers)} seconds={time.monotonic() - started_at:.0f}")  # fmt: skip

    assert set(statuses) <= {200, CUT_OFF} | RETRYABLE, f"unexpected outcomes: {statuses}"
    assert all(o.right for o in answers), "a wrong answer"
    assert all(o.error for o in refusals), "a refusal without the OIP error body"
    assert all(o.retry_after for o in refusals if o.status == 429), "a 429 without Retry-After"
    # Cut off: only requests on the killed gateway's connections when it died: at most one in flight per client
    # thread, and one per pooled keep-alive connection the kill closed before the client noticed.
    assert all(o.gateway == "gw-a" and o.ended_at >= killed_at for o in cut_off), cut_off
    assert len(cut_off) <= 2 * CONCURRENCY, cut_off
    assert len(answered_ids) == len(answers) + 1, "two answers with one request id"
    assert bill.duplicates == 0 and bill.billed_rows == bill.batch_size_sum == len(billed)
    assert answered_ids <= billed, f"{len(answered_ids - billed)} answered requests unbilled"
    assert len(billed - answered_ids) <= len(cut_off), "billed beyond the answers and the cut-off requests"
    assert load.answered("gw-a") > 0 and load.answered("gw-b") > 0
