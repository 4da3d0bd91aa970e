"""The request queue contract (scheduler/queues/base.py), run on both backends: the in-memory queue of the
embedded platform and Redis Streams. The gateway side is driven from an asyncio loop, the worker side from
threads, as in the platform."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from luminal.scheduler.queues import QueueFull, ResultTimeout, backend_of, open_queue
from luminal.scheduler.work import EXPIRED, FAILED, OK, InferenceResult
from tests.scheduler.queue_fixtures import DEPLOYMENT, ok_result, request

# --- ordering ---


def test_fifo_within_a_level_and_most_urgent_level_first(queue):
    submitted = [request(priority=p, value=i) for i, p in enumerate([5, 9, 1, 5, 0, 1, 9, 3])]  # 0: default (5)
    for req in submitted:
        queue.submit(req, max_depth=100)
    taken = queue.take(DEPLOYMENT, "w1", max_items=100, wait_s=0)
    order = [d.request.inputs["x"][0, 0] for d in taken]
    assert order == [2, 5, 7, 0, 3, 4, 1, 6]
    assert [d.request.id for d in taken] == [submitted[int(i)].id for i in order]
    assert all(d.attempts == 1 for d in taken)


def test_a_worker_that_found_the_queue_empty_still_takes_most_urgent_first_and_all_of_it(queue):
    # A worker between requests looks at an empty queue first; what arrives after is still taken in order.
    assert queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=0) == []
    submitted = [request(priority=p, value=i) for i, p in enumerate([9, 5, 1, 9, 1])]
    for req in submitted:
        queue.submit(req, max_depth=100)
    first = queue.take(DEPLOYMENT, "w1", max_items=1, wait_s=0)
    rest = queue.take(DEPLOYMENT, "w1", max_items=2, wait_s=0.5) + queue.take(DEPLOYMENT, "w1", 10, wait_s=0)
    assert [d.request.inputs["x"][0, 0] for d in first + rest] == [2, 4, 1, 0, 3]
    assert queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=0) == []
    assert queue.depth(DEPLOYMENT) == 0 and queue.in_flight(DEPLOYMENT) == 5


def test_take_returns_at_most_max_items_and_leaves_the_rest(queue):
    for i in range(5):
        queue.submit(request(value=i), max_depth=10)
    first = queue.take(DEPLOYMENT, "w1", max_items=2, wait_s=0)
    assert [d.request.inputs["x"][0, 0] for d in first] == [0, 1]
    assert queue.depth(DEPLOYMENT) == 3 and queue.in_flight(DEPLOYMENT) == 2
    rest = queue.take(DEPLOYMENT, "w2", max_items=10, wait_s=0)
    assert [d.request.inputs["x"][0, 0] for d in rest] == [2, 3, 4]


def test_deployments_have_separate_queues(queue):
    queue.submit(request(deployment=1), max_depth=1)
    queue.submit(request(deployment=2), max_depth=1)  # a full deployment 1 does not refuse deployment 2
    assert queue.take(3, "w1", max_items=5, wait_s=0) == []
    assert [d.request.deployment_id for d in queue.take(2, "w1", max_items=5, wait_s=0)] == [2]


def test_a_take_with_no_wait_never_blocks(queue):
    # The batch former relies on it: a free worker's take of what is queued must not sleep on an empty queue.
    started = time.monotonic()
    assert queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=0) == []
    assert time.monotonic() - started < 0.5  # well under one blocking read on Redis (MAX_BLOCK_S, 1 s)


def test_take_waits_then_returns_empty(queue):
    started = time.monotonic()
    assert queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=0.3) == []
    assert time.monotonic() - started >= 0.25


def test_take_wakes_when_a_request_arrives(queue):
    req = request()
    submitter = threading.Timer(0.2, queue.submit, args=(req, 10))
    submitter.start()
    started = time.monotonic()
    taken = queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=5)
    submitter.join()  # the worker can have it before the submitter has its reply: close the queue after both
    assert [d.request.id for d in taken] == [req.id]
    assert time.monotonic() - started < 3


# --- admission ---


def test_full_queue_refuses_with_retry_after_and_counts_only_queued(queue):
    for _ in range(3):
        queue.submit(request(), max_depth=3)
    with pytest.raises(QueueFull) as refused:
        queue.submit(request(), max_depth=3)
    assert refused.value.depth == 3 and refused.value.deployment_id == DEPLOYMENT
    assert refused.value.retry_after_s > 0
    assert queue.depth(DEPLOYMENT) == 3
    queue.take(DEPLOYMENT, "w1", max_items=1, wait_s=0)  # in flight no longer counts towards the limit
    queue.submit(request(), max_depth=3)
    assert queue.depth(DEPLOYMENT) == 3 and queue.in_flight(DEPLOYMENT) == 1


def test_enqueue_on_the_gateways_loop_admits_and_refuses_as_submit_does(queue, gateway_loop):
    def enqueue(req):
        return asyncio.run_coroutine_threadsafe(queue.enqueue(req, max_depth=2), gateway_loop).result(30)

    first, second = request(), request()
    enqueue(first)
    queue.submit(second, max_depth=2)
    with pytest.raises(QueueFull):
        enqueue(request())
    assert queue.depth(DEPLOYMENT) == 2
    assert [d.request.id for d in queue.take(DEPLOYMENT, "w1", max_items=5, wait_s=0)] == [first.id, second.id]


def test_concurrent_submitters_never_exceed_max_depth(queue):
    accepted, refused, lock = [], [], threading.Lock()

    def submitter():
        for _ in range(15):
            req = request()
            try:
                queue.submit(req, max_depth=20)
                outcome = accepted
            except QueueFull:
                outcome = refused
            with lock:
                outcome.append(req.id)

    threads = [threading.Thread(target=submitter) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) == 20 and len(refused) == 6 * 15 - 20
    assert queue.depth(DEPLOYMENT) == 20
    assert {d.request.id for d in queue.take(DEPLOYMENT, "w1", max_items=100, wait_s=0)} == set(accepted)


def test_bad_arguments_are_refused(queue):
    with pytest.raises(ValueError, match="priority 11 is out of range"):
        queue.submit(request(priority=11), max_depth=5)
    with pytest.raises(ValueError, match="max_depth"):
        queue.submit(request(), max_depth=0)
    with pytest.raises(ValueError, match="max_items"):
        queue.take(DEPLOYMENT, "w1", max_items=0, wait_s=0)
    assert queue.depth(DEPLOYMENT) == 0


# --- deadlines ---


def test_expired_request_is_answered_504_and_never_taken(queue, wait):
    stale = request(deadline=time.time() + 0.2)
    fresh = request(deadline=time.time() + 60)
    queue.submit(stale, max_depth=5)
    queue.submit(fresh, max_depth=5)
    time.sleep(0.3)
    taken = queue.take(DEPLOYMENT, "w1", max_items=5, wait_s=0)
    assert [d.request.id for d in taken] == [fresh.id]
    result = wait(queue, stale.id)
    assert result.status == EXPIRED and result.outputs is None
    assert "timeout passed before execution" in result.error
    assert queue.depth(DEPLOYMENT) == 0 and queue.in_flight(DEPLOYMENT) == 1


# --- results ---


def test_result_round_trips_and_is_delivered_once(queue, wait):
    req = request(value=1.5)
    queue.submit(req, max_depth=5)
    (delivery,) = queue.take(DEPLOYMENT, "w1", max_items=5, wait_s=0)
    queue.complete(delivery, ok_result(req))  # completed before anyone waits: kept for the waiter
    result = wait(queue, req.id)
    assert result.request_id == req.id and result.status == OK and result.worker_id == "w1"
    np.testing.assert_array_equal(result.outputs["y"], np.full((2, 3), 3.0, np.float32))
    with pytest.raises(ResultTimeout):
        wait(queue, req.id, timeout=0.2)


def test_waiting_gateway_is_woken_by_a_worker_thread(queue, gateway_loop):
    req = request()
    queue.submit(req, max_depth=5)
    waiting = asyncio.run_coroutine_threadsafe(queue.wait_result(req.id, timeout=5), gateway_loop)
    (delivery,) = queue.take(DEPLOYMENT, "w1", max_items=1, wait_s=5)  # this thread is the worker
    time.sleep(0.2)  # the gateway is already waiting
    assert not waiting.done()
    queue.complete(delivery, ok_result(req))
    assert waiting.result(timeout=5).status == OK


def test_wait_result_times_out(queue, wait):
    started = time.monotonic()
    with pytest.raises(ResultTimeout, match="no result"):
        wait(queue, "never-submitted", timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 3
    with pytest.raises(ResultTimeout):
        wait(queue, "never-submitted", timeout=0)


def test_a_waiter_that_gave_up_leaves_the_result_for_the_next(queue, gateway_loop, wait):
    req = request()
    queue.submit(req, max_depth=5)
    (delivery,) = queue.take(DEPLOYMENT, "w1", max_items=1, wait_s=0)
    with pytest.raises(ResultTimeout):
        wait(queue, req.id, timeout=0.1)
    cancelled = asyncio.run_coroutine_threadsafe(queue.wait_result(req.id, timeout=30), gateway_loop)
    time.sleep(0.1)
    cancelled.cancel()  # the client went away mid-wait
    time.sleep(0.1)
    queue.complete(delivery, ok_result(req))
    assert wait(queue, req.id).status == OK  # an async prediction polled again


def test_memory_a_result_claimed_as_the_wait_times_out_is_still_returned(gateway_loop):
    """The worker takes the waiter while the gateway's timeout is firing: the result it delivers must win, or the
    answered (and billed) request would be reported as timed out."""
    queue = open_queue(None)
    req = request()
    queue.submit(req, max_depth=5)
    (delivery,) = queue.take(DEPLOYMENT, "w1", max_items=1, wait_s=0)
    waiting = asyncio.run_coroutine_threadsafe(queue.wait_result(req.id, timeout=0.2), gateway_loop)
    while req.id not in queue._waiters:  # the gateway waits
        time.sleep(0.001)
    with queue._lock:  # the worker holds the lock past the timeout: the gateway's timer waits for it
        time.sleep(0.4)
        queue.complete(delivery, ok_result(req))  # claims the waiter the timer is about to give up
    assert waiting.result(timeout=5).status == OK
    queue.close()


def test_result_stored_before_acknowledged_and_a_second_completion_is_ignored(queue, wait):
    req = request()
    queue.submit(req, max_depth=5)
    (delivery,) = queue.take(DEPLOYMENT, "w1", max_items=1, wait_s=0)
    assert queue.in_flight(DEPLOYMENT) == 1
    queue.complete(delivery, ok_result(req))
    assert queue.in_flight(DEPLOYMENT) == 0 and queue.depth(DEPLOYMENT) == 0
    assert queue.reclaim(DEPLOYMENT, "w2", min_idle_s=0, max_items=5) == []
    queue.complete(delivery, InferenceResult(req.id, FAILED, error="a late duplicate"))
    assert wait(queue, req.id).status == OK
    with pytest.raises(ResultTimeout):
        wait(queue, req.id, timeout=0.2)


def test_a_batch_completes_in_one_step_and_only_what_is_still_pending_is_stored(queue, wait):
    reqs = [request(value=v) for v in (1.0, 2.0, 3.0, 4.0)]
    for req in reqs:
        queue.submit(req, max_depth=10)
    deliveries = queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=0)
    queue.complete(deliveries[0], ok_result(reqs[0]))  # answered before: the batch's copy is a late duplicate
    late = InferenceResult(reqs[0].id, FAILED, error="a late duplicate")
    queue.complete_all([(deliveries[0], late)] + [(d, ok_result(d.request, "w2")) for d in deliveries[1:]])
    queue.complete_all([])
    assert queue.in_flight(DEPLOYMENT) == 0 and queue.depth(DEPLOYMENT) == 0
    assert wait(queue, reqs[0].id).worker_id == "w1"
    for req in reqs[1:]:
        result = wait(queue, req.id)
        assert result.status == OK and result.worker_id == "w2"
        np.testing.assert_array_equal(result.outputs["y"], req.inputs["x"] * 2)
    with pytest.raises(ResultTimeout):
        wait(queue, reqs[0].id, timeout=0.2)


def test_unclaimed_results_expire(queue_factory, wait):
    queue = queue_factory(result_ttl_s=0.2)
    req = request()
    queue.submit(req, max_depth=5)
    (delivery,) = queue.take(DEPLOYMENT, "w1", max_items=1, wait_s=0)
    queue.complete(delivery, ok_result(req))
    time.sleep(0.4)
    with pytest.raises(ResultTimeout):
        wait(queue, req.id, timeout=0.1)


# --- reclaim ---


def test_reclaim_hands_over_only_what_a_dead_consumer_left(queue, wait):
    done, abandoned = request(value=1), request(value=2)
    queue.submit(done, max_depth=5)
    queue.submit(abandoned, max_depth=5)
    first, second = queue.take(DEPLOYMENT, "dead", max_items=2, wait_s=0)
    queue.complete(first, ok_result(done, "dead"))
    assert queue.reclaim(DEPLOYMENT, "w2", min_idle_s=10, max_items=5) == []  # not idle long enough yet
    time.sleep(0.3)
    (reclaimed,) = queue.reclaim(DEPLOYMENT, "w2", min_idle_s=0.2, max_items=5)
    assert reclaimed.request.id == abandoned.id and reclaimed.attempts == 2
    assert queue.reclaim(DEPLOYMENT, "w3", min_idle_s=0.2, max_items=5) == []  # its idle time restarted
    assert queue.in_flight(DEPLOYMENT) == 1
    queue.complete(reclaimed, ok_result(abandoned, "w2"))
    assert wait(queue, abandoned.id).worker_id == "w2"
    queue.complete(second, ok_result(abandoned, "dead"))  # the presumed-dead worker finishes late: ignored
    with pytest.raises(ResultTimeout):
        wait(queue, abandoned.id, timeout=0.1)
    assert queue.in_flight(DEPLOYMENT) == 0


def test_reclaim_answers_requests_that_expired_meanwhile(queue, wait):
    req = request(deadline=time.time() + 0.2)
    queue.submit(req, max_depth=5)
    queue.take(DEPLOYMENT, "dead", max_items=1, wait_s=0)
    time.sleep(0.3)
    assert queue.reclaim(DEPLOYMENT, "w2", min_idle_s=0, max_items=5) == []
    assert wait(queue, req.id).status == EXPIRED
    assert queue.in_flight(DEPLOYMENT) == 0


def test_one_arrival_wakes_one_of_several_idle_workers(queue):
    got: dict[str, list] = {}
    takers = [threading.Thread(target=lambda w=w: got.__setitem__(w, queue.take(DEPLOYMENT, w, 4, 1.0)))
              for w in ("w1", "w2", "w3")]  # fmt: skip
    for taker in takers:
        taker.start()
    time.sleep(0.2)  # all three are blocked
    req = request()
    queue.submit(req, max_depth=10)
    for taker in takers:
        taker.join(timeout=10)
    assert sorted(len(taken) for taken in got.values()) == [0, 0, 1]
    assert [d.request.id for taken in got.values() for d in taken] == [req.id]


# --- the factory ---


@pytest.mark.parametrize("url", ["", None, "memory://", " memory:// "])
def test_open_queue_memory(url):
    queue = open_queue(url)
    try:
        assert type(queue).__name__ == "MemoryQueue"
    finally:
        queue.close()


def test_open_queue_redis_and_bad_urls():
    assert backend_of("redis://localhost:6379/0") == backend_of("rediss://cache.example:6380/1") == "redis"
    with pytest.raises(ValueError, match="redis://host:port/db"):
        open_queue("amqp://localhost")
    with pytest.raises(ValueError, match="namespace"):
        open_queue("", namespace="a b")


def test_a_wait_longer_than_the_clients_socket_timeout_still_gets_its_result(queue, wait):
    # redis-py gives its connections a 5 s socket timeout: one BLPOP blocking past it would fail the wait.
    req = request()
    queue.submit(req, max_depth=10)

    def complete_late() -> None:
        (delivery,) = queue.take(DEPLOYMENT, "w1", max_items=1, wait_s=1)
        time.sleep(5.5)
        queue.complete(delivery, ok_result(req))

    worker = threading.Thread(target=complete_late)
    worker.start()
    try:
        assert wait(queue, req.id, timeout=8).status == OK
    finally:
        worker.join()
