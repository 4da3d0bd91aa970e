"""BatchFormer against a fake queue whose requests arrive at chosen times on a stepped clock: dispatch when idle,
waiting only under load, size cap, queue delay, idle wait, carry-over. The queue's waits step the clock, so every
time is exact and nothing sleeps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from luminal.batching.former import BatchFormer, batch_capacity
from luminal.batching.layout import BatchLayout
from luminal.batching.policy import BatchPolicy
from luminal.scheduler.queues.base import Delivery
from luminal.scheduler.work import InferenceRequest
from luminal.store.clock import ManualClock

LAYOUT = BatchLayout("batch", 1, 64)


class ArrivalsQueue:
    """take() over a list of requests, each becoming visible at its arrival time (seconds from the queue's
    creation on `clock`); a take that finds nothing waits by stepping the clock to the next arrival or to the end
    of its wait, whichever comes first. Records every take's (max_items, wait_s)."""

    def __init__(self, arrivals: list[tuple[float, InferenceRequest]], clock: ManualClock):
        self.clock = clock
        self.start = clock.monotonic()
        self.pending = sorted(arrivals, key=lambda a: a[0])
        self.takes: list[tuple[int, float]] = []

    def _visible(self) -> int:
        now = self.clock.monotonic() - self.start
        return sum(1 for at, _ in self.pending if at <= now)

    def take(self, deployment_id: int, consumer: str, max_items: int, wait_s: float) -> list[Delivery]:
        assert (deployment_id, consumer) == (7, "worker-a")
        self.takes.append((max_items, wait_s))
        if not self._visible():
            now = self.clock.monotonic() - self.start
            next_arrival = self.pending[0][0] if self.pending else math.inf
            self.clock.advance(min(next_arrival, now + wait_s) - now)
        taken = self.pending[: min(self._visible(), max_items)]
        del self.pending[: len(taken)]
        return [Delivery(r, tag=r.id) for _, r in taken]


def req(rows: int = 1) -> InferenceRequest:
    return InferenceRequest(7, 1, {"x": np.zeros((rows, 4), np.float32)})


def former_over(arrivals) -> tuple[BatchFormer, ArrivalsQueue]:
    queue = ArrivalsQueue(arrivals, ManualClock())
    return BatchFormer(queue, 7, "worker-a", queue.clock), queue


def ids(batch: list[Delivery]) -> list[str]:
    return [d.request.id for d in batch]


def former_start(former: BatchFormer) -> float:
    """The time the former's fake queue was made: arrivals count from it."""
    return former.queue.start


def timed(former: BatchFormer, fn):
    """fn's result and how long it took on the former's clock."""
    start = former.clock.monotonic()
    result = fn()
    return result, former.clock.monotonic() - start


def test_a_full_batch_leaves_at_once_and_is_capped_at_the_policy_size():
    requests = [req() for _ in range(10)]
    former, queue = former_over([(0.0, r) for r in requests])
    policy = BatchPolicy(4, max_queue_delay_s=5.0)
    first, elapsed = timed(former, lambda: former.next_batch(policy, LAYOUT, idle_wait_s=1.0))
    assert ids(first) == [r.id for r in requests[:4]]
    assert elapsed == 0  # full: it never waited for the 5 s delay
    assert ids(former.next_batch(policy, LAYOUT, 1.0)) == [r.id for r in requests[4:8]]
    assert all(max_items <= 4 for max_items, _ in queue.takes)


@pytest.mark.parametrize("delay_s", [0.0, 0.15])
def test_an_idle_worker_answers_a_lone_request_without_waiting_for_the_delay(delay_s):
    lone = req()
    former, queue = former_over([(0.0, lone)])
    batch, elapsed = timed(former, lambda: former.next_batch(BatchPolicy(8, delay_s), LAYOUT, idle_wait_s=1.0))
    assert ids(batch) == [lone.id]
    assert elapsed == 0
    assert len(queue.takes) == 1  # one take of what was queued; no wait for company


def test_requests_arriving_one_at_a_time_to_an_idle_worker_each_leave_at_once():
    requests = [req() for _ in range(3)]
    former, _ = former_over([(float(i), r) for i, r in enumerate(requests)])
    policy = BatchPolicy(8, 0.5)
    for i, r in enumerate(requests):
        batch = former.next_batch(policy, LAYOUT, idle_wait_s=5.0)
        assert ids(batch) == [r.id]
        assert former.clock.monotonic() - former_start(former) == pytest.approx(i)  # its arrival, no delay


def test_an_empty_queue_gives_an_empty_batch_after_the_idle_wait():
    former, queue = former_over([])
    batch, elapsed = timed(former, lambda: former.next_batch(BatchPolicy(8, 10.0), LAYOUT, idle_wait_s=0.1))
    assert batch == [] and elapsed == pytest.approx(0.1)
    assert queue.takes == [(8, 0.1)]


def test_a_burst_takes_what_is_queued_at_once_in_full_batches():
    burst = [req() for _ in range(6)]
    former, _ = former_over([(0.0, r) for r in burst])
    policy = BatchPolicy(4, 5.0)
    first, elapsed = timed(former, lambda: former.next_batch(policy, LAYOUT, idle_wait_s=1.0))
    assert ids(first) == [r.id for r in burst[:4]] and elapsed == 0


def test_a_busy_worker_waits_for_as_many_rows_as_its_last_batch_within_the_delay():
    # The last batch held 3 rows: after it, requests trickling in are batched again, and the batch leaves once it
    # holds 3 (not at the 2 s delay, not with the first arrival alone).
    last = [req() for _ in range(3)]
    next_three, later = [req() for _ in range(3)], req()
    # Times in binary fractions, so the stepped clock lands on each arrival exactly.
    arrivals = [(0.0, r) for r in last] + [(0.125, next_three[0]), (0.25, next_three[1]), (0.375, next_three[2])]
    former, _ = former_over([*arrivals, (3.0, later)])
    policy = BatchPolicy(8, 2.0)
    assert ids(former.next_batch(policy, LAYOUT, idle_wait_s=1.0)) == [r.id for r in last]
    batch, elapsed = timed(former, lambda: former.next_batch(policy, LAYOUT, idle_wait_s=1.0))
    assert ids(batch) == [r.id for r in next_three]
    assert elapsed == pytest.approx(0.375)


def test_the_delay_counts_from_the_first_request_not_the_last():
    last = [req() for _ in range(3)]
    first, second, third = req(), req(), req()
    former, _ = former_over([*((0.0, r) for r in last), (1.0, first), (1.125, second), (1.5, third)])
    policy = BatchPolicy(8, 0.25)
    former.next_batch(policy, LAYOUT, idle_wait_s=5.0)  # 3 rows: under load, the next batch waits for company
    batch = former.next_batch(policy, LAYOUT, idle_wait_s=5.0)
    assert ids(batch) == [first.id, second.id]
    assert former.clock.monotonic() - former_start(former) == pytest.approx(1.0 + 0.25)


def test_a_worker_that_waited_idle_forgets_the_load_and_answers_at_once():
    last = [req() for _ in range(3)]
    lone = req()
    former, _ = former_over([*((0.0, r) for r in last), (2.0, lone)])
    policy = BatchPolicy(8, 0.5)
    former.next_batch(policy, LAYOUT, idle_wait_s=1.0)
    assert former.next_batch(policy, LAYOUT, idle_wait_s=1.0) == []  # nothing for a whole idle wait
    assert ids(former.next_batch(policy, LAYOUT, idle_wait_s=1.0)) == [lone.id]
    assert former.clock.monotonic() - former_start(former) == 2.0  # left on its arrival, not 0.5 s later


def test_an_overflowing_request_is_carried_to_the_next_batch_in_order():
    requests = [req(2), req(3), req(1), req(1)]
    former, queue = former_over([(0.0, r) for r in requests])
    policy = BatchPolicy(4, 0.05)
    batches = [ids(former.next_batch(policy, LAYOUT, 0.5)) for _ in range(3)]
    assert batches == [[requests[0].id], [requests[1].id, requests[2].id], [requests[3].id]]
    assert former.carried == 0 and queue.pending == []
    assert former.next_batch(policy, LAYOUT, 0.05) == []


def test_a_request_larger_than_a_batch_runs_alone():
    big, small = req(6), req(1)
    former, _ = former_over([(0.0, big), (0.0, small)])
    policy = BatchPolicy(4, 0.05)
    assert ids(former.next_batch(policy, LAYOUT, 0.5)) == [big.id]
    assert ids(former.next_batch(policy, LAYOUT, 0.5)) == [small.id]


def test_a_request_with_disagreeing_extents_runs_alone():
    a, odd, b = req(1), InferenceRequest(7, 1, {"x": np.zeros((2, 4)), "m": np.zeros((3, 4))}), req(1)
    former, _ = former_over([(0.0, a), (0.0, odd), (0.0, b)])
    policy = BatchPolicy(8, 0.05)
    assert [ids(former.next_batch(policy, LAYOUT, 0.5)) for _ in range(3)] == [[a.id], [odd.id], [b.id]]


def test_an_unbatchable_program_gets_one_request_per_batch():
    requests = [req(), req()]
    former, queue = former_over([(0.0, r) for r in requests])
    policy = BatchPolicy(8, 5.0)
    batch, elapsed = timed(former, lambda: former.next_batch(policy, None, 0.5))
    assert ids(batch) == [requests[0].id] and elapsed == 0
    assert ids(former.next_batch(policy, None, 0.5)) == [requests[1].id]
    assert all(max_items == 1 for max_items, _ in queue.takes)


def test_capacity_is_the_smallest_of_policy_symbol_and_buckets():
    assert batch_capacity(BatchPolicy(32, 0), BatchLayout("b", 1, 16)) == 16
    assert batch_capacity(BatchPolicy(32, 0), BatchLayout("b", 1, 64, (4, 8))) == 8
    assert batch_capacity(BatchPolicy(3, 0), BatchLayout("b", 1, 64, (4, 8))) == 3
    assert batch_capacity(BatchPolicy(3, 0), None) == 1
