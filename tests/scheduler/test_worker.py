"""A worker end to end on the in-memory queue: concurrent requests batched and answered with their own rows,
each executed batch billed once with shares that sum to its time, bad and expired requests answered without
harming their neighbours, and a stop that serves what the former still held."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.artifact import save_program
from luminal.graph_json import signature, symbol_table
from luminal.scheduler.programs import ProgramCache
from luminal.scheduler.queues.memory import MemoryQueue
from luminal.scheduler.registry import open_registry
from luminal.scheduler.work import EXPIRED, INVALID_INPUT, OK, InferenceRequest
from luminal.scheduler.worker import Worker
from luminal.scheduler.worker_spec import WorkerSpec
from tests.gateway.conftest import tiny_graph

DEPLOYMENT = 7


class ListLedger:
    def __init__(self):
        self.records = []
        self.lock = threading.Lock()

    def record(self, record) -> bool:
        with self.lock:
            if any(r.batch_id == record.batch_id for r in self.records):
                return False
            self.records.append(record)
            return True


@pytest.fixture(scope="module")
def program_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("programs")
    save_program(lm.compile(tiny_graph(), target="cpu"), folder / "tiny.lprog")
    return folder


def spec(max_batch_size: int = 16, delay_ms: int = 50, gpu_type: str = "cpu") -> WorkerSpec:
    g = tiny_graph()
    return WorkerSpec(
        deployment_id=DEPLOYMENT,
        tenant_id=1,
        model="tiny",
        version=1,
        program_key="tiny.lprog",
        gpu_type=gpu_type,
        max_batch_size=max_batch_size,
        max_queue_delay_ms=delay_ms,
        min_replicas=0,
        max_replicas=1,
        signature=signature(g),
        symbols=symbol_table(g),
    )


class Running:
    def __init__(self, program_dir: Path, worker_spec: WorkerSpec, device: str = "cpu"):
        self.queue, self.ledger, self.registry = MemoryQueue(), ListLedger(), open_registry(None)
        programs = ProgramCache(lambda key: program_dir / key)
        self.worker = Worker(worker_spec, self.queue, programs, self.ledger, self.registry, device=device)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.worker.run, args=(self.stop,), daemon=True)

    def __enter__(self):
        self.thread.start()
        assert self.worker.ready.wait(60)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        self.queue.close()

    def serve(self, requests: list[InferenceRequest], max_depth: int = 1000) -> list:
        async def all_results():
            for r in requests:
                self.queue.submit(r, max_depth)
            return await asyncio.gather(*(self.queue.wait_result(r.id, 30) for r in requests))

        return asyncio.run(all_results())


def request(rows: np.ndarray, **kw) -> InferenceRequest:
    return InferenceRequest(DEPLOYMENT, 1, {"x": rows}, **kw)


def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(program_dir):
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1 + i % 3, 4)).astype(np.float32) for i in range(12)]
    with Running(program_dir, spec(max_batch_size=16, delay_ms=100)) as running:
        results = running.serve([request(x) for x in inputs])
    for x, result in zip(inputs, results):
        assert result.status == OK, result.error
        np.testing.assert_allclose(result.outputs["probs"], lm.run(tiny_graph(), {"x": x})["probs"], rtol=1e-5)
    assert max(r.batch_size for r in results) > 1, "nothing was batched"
    records = running.ledger.records
    assert sum(r.batch_leader for r in results) == len(records)
    assert sorted(i for rec in records for i in rec.request_ids) == sorted(r.request_id for r in results)
    assert all(sum(rec.request_rows) <= 16 for rec in records)
    for rec in records:
        mine = [r for r in results if r.batch_id == rec.batch_id]
        assert sum(r.billed_seconds for r in mine) == pytest.approx(rec.ended_at - rec.started_at)
        assert rec.gpu_type == "cpu" and rec.deployment_id == DEPLOYMENT


def test_batches_are_billed_as_the_device_the_worker_runs_on(program_dir):
    # The backend chose the device (a "t4" here, standing in for the GPU it found); the spec's own gpu_type is
    # only what was asked: the ledger records what ran, and the registry shows it.
    with Running(program_dir, spec(gpu_type="cpu"), device="t4") as running:
        assert [w.device for w in running.registry.workers(DEPLOYMENT)] == ["t4"]
        results = running.serve([request(np.ones((1, 4), np.float32)) for _ in range(3)])
    assert all(r.status == OK for r in results)
    assert running.ledger.records and {rec.gpu_type for rec in running.ledger.records} == {"t4"}


def test_a_bad_request_fails_alone_and_its_neighbours_succeed(program_dir):
    good = [request(np.ones((1, 4), np.float32)) for _ in range(3)]
    bad = request(np.ones((1, 5), np.float32))  # 5 features where the model takes 4
    with Running(program_dir, spec(delay_ms=100)) as running:
        results = running.serve([good[0], bad, *good[1:]])
    assert [r.status for r in results] == [OK, INVALID_INPUT, OK, OK]
    assert "x" in results[1].error or "4" in results[1].error
    billed = {i for rec in running.ledger.records for i in rec.request_ids}
    assert bad.id not in billed and {g.id for g in good} <= billed


def test_an_expired_request_is_answered_504_and_never_executed(program_dir):
    late = request(np.ones((1, 4), np.float32), deadline=time.time() - 1)
    on_time = request(np.ones((1, 4), np.float32))
    with Running(program_dir, spec()) as running:
        results = running.serve([late, on_time])
    assert [r.status for r in results] == [EXPIRED, OK]
    assert late.id not in {i for rec in running.ledger.records for i in rec.request_ids}


def test_the_worker_registers_heartbeats_and_deregisters(program_dir):
    running = Running(program_dir, spec())
    with running:
        (info,) = running.registry.workers(DEPLOYMENT)
        assert info.worker_id == running.worker.worker_id and info.ready_at is not None
    assert running.registry.workers(DEPLOYMENT) == []


def test_a_failing_batch_fails_each_of_its_requests_with_the_reason(program_dir):
    from luminal.batching.layout import BatchLayout
    from luminal.scheduler.batch_execution import BatchExecutor
    from luminal.scheduler.queues.base import Delivery
    from luminal.scheduler.work import FAILED
    from luminal.scheduler.worker import batching_for

    worker_spec = spec()
    layout, policy = batching_for(worker_spec)
    assert isinstance(layout, BatchLayout)
    queue, ledger = MemoryQueue(), ListLedger()
    requests = [request(np.ones((1, 4), np.float32)) for _ in range(3)]
    for r in requests:
        queue.submit(r, 10)
    deliveries: list[Delivery] = queue.take(DEPLOYMENT, "w", 10, 1)

    def broken_program(inputs):
        raise RuntimeError("device lost")

    BatchExecutor(worker_spec, "w", "cpu", queue, ledger, layout, policy).execute(broken_program, deliveries)

    async def results():
        return [await queue.wait_result(r.id, 5) for r in requests]

    answered = asyncio.run(results())
    assert [a.status for a in answered] == [FAILED] * 3
    assert all("RuntimeError: device lost" in a.error for a in answered)
    assert ledger.records == []  # nothing executed, nothing billed
    queue.close()
