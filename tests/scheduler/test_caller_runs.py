"""A lone request run on its caller's thread in place of an idle worker thread (scheduler/caller_runs.py): the
in-memory queue's direct delivery, and a real worker that lets a caller run for it only while it is idle, its
program quick and nothing queued; what the caller runs is billed once and answered through the queue."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from luminal.scheduler.caller_runs import CallerRuns
from luminal.scheduler.programs import ProgramCache
from luminal.scheduler.queues.memory import MemoryQueue
from luminal.scheduler.registry import open_registry
from luminal.scheduler.work import OK, InferenceRequest, InferenceResult
from luminal.scheduler.worker import Worker
from tests.scheduler.test_worker import DEPLOYMENT, ListLedger, spec
from tests.scheduler.test_worker import program_dir as program_dir  # the fixture  # noqa: F401

# --- the queue's direct delivery ---


def request(deployment: int = DEPLOYMENT, priority: int = 5) -> InferenceRequest:
    return InferenceRequest(deployment, 1, {"x": np.ones((1, 4), np.float32)}, priority=priority)


def test_deliver_now_hands_a_request_to_the_consumer_when_its_deployment_has_nothing_queued():
    queue = MemoryQueue()
    lone = request()
    delivery = queue.deliver_now(lone, "caller")
    assert delivery is not None and delivery.request is lone
    # Delivered, not queued: in flight under the consumer, completed and answered like any delivery.
    assert queue.depth(DEPLOYMENT) == 0 and queue.in_flight(DEPLOYMENT) == 1
    queue.complete(delivery, InferenceResult(lone.id, OK, {"y": np.zeros(1)}))
    assert asyncio.run(queue.wait_result(lone.id, 1.0)).status == OK
    assert queue.in_flight(DEPLOYMENT) == 0


def test_deliver_now_leaves_a_request_to_wait_its_turn_behind_queued_ones():
    queue = MemoryQueue()
    waiting = request(priority=9)  # even a less urgent one queued first keeps its place
    queue.submit(waiting, max_depth=10)
    assert queue.deliver_now(request(priority=1), "caller") is None
    assert queue.depth(DEPLOYMENT) == 1 and queue.in_flight(DEPLOYMENT) == 0  # nothing changed
    other = request(deployment=DEPLOYMENT + 1)  # another deployment's queue is its own
    assert queue.deliver_now(other, "caller") is not None


def test_deliver_now_on_a_closed_queue_raises():
    queue = MemoryQueue()
    queue.close()
    with pytest.raises(RuntimeError, match="closed"):
        queue.deliver_now(request(), "caller")


# --- a worker that lets a caller run for it ---


class Serving:
    """A worker thread on the in-memory queue with a CallerRuns; its program records the thread of each run and
    holds every run while `gate` is clear."""

    def __init__(self, program_dir, max_run_s: float = 10.0):
        self.queue, self.ledger = MemoryQueue(), ListLedger()
        programs = ProgramCache(lambda key: program_dir / key)
        loaded = programs.get("tiny.lprog")
        self.run_threads: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        run = loaded.run

        def recorded(inputs):
            self.run_threads.append(threading.get_ident())
            assert self.gate.wait(30)
            return run(inputs)

        loaded.run = recorded  # the worker takes the cached program's run when it starts serving
        self.caller_runs = CallerRuns(max_run_s)
        # A minute of queue delay: a request that waited for company could never be answered within a test.
        self.worker = Worker(spec(delay_ms=60_000), self.queue, programs, self.ledger, open_registry(None),
                             caller_runs=self.caller_runs)  # fmt: skip
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.worker.run, args=(self.stop,), daemon=True)

    def __enter__(self):
        self.thread.start()
        assert self.worker.ready.wait(60)
        # The worker's own thread runs the first request: until a run was timed, nobody knows what one costs.
        first = request()
        assert not self.caller_runs.run(first)
        self.queue.submit(first, max_depth=10)
        assert self.result(first, timeout=30).status == OK
        self.wait_idle()
        return self

    def __exit__(self, *exc):
        self.gate.set()
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        self.queue.close()

    def wait_idle(self) -> None:
        """Until the worker's thread waits for a first request again (whatever its program costs)."""
        wait_until(lambda: self.worker.may_serve_now(float("inf")))

    def result(self, req: InferenceRequest, timeout: float = 0.0) -> InferenceResult:
        return asyncio.run(self.queue.wait_result(req.id, timeout))


def wait_until(condition, timeout_s: float = 30.0) -> None:
    pause = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        pause.wait(0.01)
    raise AssertionError(f"timed out after {timeout_s} s waiting for the worker")


def test_an_idle_worker_lets_its_caller_run_a_lone_request_at_once_and_bills_it_once(program_dir):
    with Serving(program_dir) as serving:
        lone = request()
        assert serving.caller_runs.run(lone)
        # Ran on this thread, before `run` returned: the result is there without waiting (timeout 0), although
        # the deployment's queue delay is a minute.
        assert serving.run_threads[-1] == threading.get_ident() != serving.thread.ident
        result = serving.result(lone)
        assert result.status == OK and result.worker_id == serving.worker.worker_id and result.batch_size == 1
        np.testing.assert_allclose(result.outputs["probs"].sum(), 1.0, rtol=1e-5)
        billed = [r for r in serving.ledger.records if lone.id in r.request_ids]
        assert len(billed) == 1 and billed[0].worker_id == serving.worker.worker_id
        assert serving.queue.in_flight(DEPLOYMENT) == 0
        # The worker's thread still serves what is queued.
        queued = request()
        serving.queue.submit(queued, max_depth=10)
        assert serving.result(queued, timeout=30).status == OK
        assert serving.run_threads[-1] == serving.thread.ident


def test_nobody_runs_in_place_of_a_worker_that_is_executing(program_dir):
    with Serving(program_dir) as serving:
        serving.gate.clear()
        busy = request()
        serving.queue.submit(busy, max_depth=10)
        runs = len(serving.run_threads)
        wait_until(lambda: len(serving.run_threads) > runs)  # the worker's thread is inside the program
        late = request()
        assert not serving.caller_runs.may_run(DEPLOYMENT) and not serving.caller_runs.run(late)
        assert serving.queue.in_flight(DEPLOYMENT) == 1 and serving.queue.depth(DEPLOYMENT) == 0  # nothing changed
        serving.queue.submit(late, max_depth=10)  # so it waits its turn, as the gateway then does
        serving.gate.set()
        assert serving.result(busy, timeout=30).status == OK and serving.result(late, timeout=30).status == OK
        assert serving.run_threads[-1] == serving.thread.ident
        assert sorted(i for rec in serving.ledger.records for i in rec.request_ids if i in {busy.id, late.id}) == \
            sorted([busy.id, late.id])  # fmt: skip


def test_a_program_slower_than_the_limit_is_left_to_the_worker_thread(program_dir):
    with Serving(program_dir, max_run_s=1e-9) as serving:  # every real run is slower than a nanosecond
        assert not serving.caller_runs.may_run(DEPLOYMENT)
        assert not serving.caller_runs.run(request())
        assert serving.queue.in_flight(DEPLOYMENT) == 0
    with Serving(program_dir, max_run_s=0) as serving:  # 0 turns it off
        assert not serving.caller_runs.run(request())


def test_a_stopped_worker_leaves_the_caller_nothing_to_run_for(program_dir):
    with Serving(program_dir) as serving:
        serving.stop.set()
        serving.thread.join(30)
        assert not serving.caller_runs.may_run(DEPLOYMENT) and not serving.caller_runs.run(request())
