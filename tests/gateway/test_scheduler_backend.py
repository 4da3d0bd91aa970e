"""The gateway's scheduler backend on the embedded platform's parts (in-memory queue, a worker thread): a lone
request runs on the event loop in place of the idle worker, requests that arrive together go to the worker
thread (so they can be batched), and a full queue still refuses."""

from __future__ import annotations

import asyncio
import threading

import pytest

from luminal.gateway.inference_backend import DeploymentRef
from luminal.gateway.scheduler_backend import SchedulerBackend
from luminal.scheduler.queues.base import QueueFull
from luminal.scheduler.work import OK, InferenceRequest
from tests.scheduler.test_caller_runs import Serving, request
from tests.scheduler.test_worker import DEPLOYMENT
from tests.scheduler.test_worker import program_dir as program_dir  # the fixture  # noqa: F401


class Provisioner:
    """What the backend asks of the provisioner: whether a GPU type can be served, and that a request came."""

    def __init__(self):
        self.notified: list[int] = []

    def unschedulable(self, gpu_type: str) -> str | None:
        return None

    def notify(self, deployment_id: int) -> None:
        self.notified.append(deployment_id)


REF = DeploymentRef(deployment_id=DEPLOYMENT, tenant_id=1, program_key="tiny.lprog")


def backend_of(serving: Serving, max_depth: int = 100) -> tuple[SchedulerBackend, Provisioner]:
    provisioner = Provisioner()
    backend = SchedulerBackend(serving.queue, provisioner, max_depth, 30.0, 30.0, serving.caller_runs)
    return backend, provisioner


async def infer_all(backend: SchedulerBackend, requests: list[InferenceRequest]) -> tuple[list, int]:
    """The results of `requests` sent together (as concurrent clients' requests reach the loop) and the loop's
    thread."""
    results = await asyncio.gather(*(backend.infer(REF, r) for r in requests))
    return results, threading.get_ident()


def test_a_lone_request_runs_on_the_event_loop_in_place_of_the_idle_worker(program_dir):
    with Serving(program_dir) as serving:
        backend, provisioner = backend_of(serving)
        for _ in range(3):  # one after another, each alone
            (result,), loop_thread = asyncio.run(infer_all(backend, [request()]))
            assert result.status == OK and result.worker_id == serving.worker.worker_id
            assert serving.run_threads[-1] == loop_thread
        assert provisioner.notified == [DEPLOYMENT] * 3  # the deployment is active, as for a queued request
        billed = {i for rec in serving.ledger.records for i in rec.request_ids}
        assert len(serving.ledger.records) == 4 and len(billed) == 4  # 3 and the warm-up, each billed once


def test_requests_that_arrive_together_go_to_the_worker_thread(program_dir):
    with Serving(program_dir) as serving:
        backend, _ = backend_of(serving)
        runs = len(serving.run_threads)
        together = [request() for _ in range(4)]
        results, loop_thread = asyncio.run(infer_all(backend, together))
        assert [r.status for r in results] == [OK] * 4
        assert loop_thread not in serving.run_threads[runs:]
        assert [r.request_id for r in results] == [r.id for r in together]


def test_without_caller_runs_every_request_is_handed_to_the_worker(program_dir):
    with Serving(program_dir, max_run_s=0) as serving:
        backend, _ = backend_of(serving)
        (result,), loop_thread = asyncio.run(infer_all(backend, [request()]))
        assert result.status == OK and serving.run_threads[-1] == serving.thread.ident != loop_thread


def test_a_full_queue_refuses_whatever_the_worker_does(program_dir):
    with Serving(program_dir) as serving:
        backend, _ = backend_of(serving, max_depth=1)
        serving.gate.clear()  # the worker's thread is held inside its program
        busy = request()
        serving.queue.submit(busy, max_depth=1)
        while serving.queue.depth(DEPLOYMENT):  # until the worker's thread has taken it
            threading.Event().wait(0.01)
        serving.queue.submit(request(), max_depth=1)  # queued behind it: the queue is full
        with pytest.raises(QueueFull):
            asyncio.run(backend.infer(REF, request()))
        serving.gate.set()
        assert serving.result(busy, timeout=30).status == OK
