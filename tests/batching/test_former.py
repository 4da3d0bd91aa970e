"""BatchFormer against a fake queue whose requests arrive at chosen times: size cap, queue delay, idle wait,
carry-over. Times are measured, with a tolerance for scheduling noise; nothing asserts a speed."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from luminal.batching.former import BatchFormer, batch_capacity
from luminal.batching.layout import BatchLayout
from luminal.batching.policy import BatchPolicy
from luminal.scheduler.queues.base import Delivery
from luminal.scheduler.work import InferenceRequest

LAYOUT = BatchLayout("batch", 1, 64)
NOISE_S = 0.02  # how much earlier than asked a sleep-based wait may end (clock granularity)
SLACK_S = 1.0  # how much later a wait may end on a loaded 2-core machine before it counts as "forever"


class ArrivalsQueue:
    """take() over a list of requests, each becoming visible at its arrival time (monotonic seconds from the
    queue's creation); records every take's (max_items, wait_s)."""

    def __init__(self, arrivals: list[tuple[float, InferenceRequest]]):
        self.start = time.monotonic()
        self.pending = sorted(arrivals, key=lambda a: a[0])
        self.takes: list[tuple[int, float]] = []
        self.lock = threading.Lock()

    def _visible(self) -> int:
        now = time.monotonic() - self.start
        return sum(1 for at, _ in self.pending if at <= now)

    def take(self, deployment_id: int, consumer: str, max_items: int, wait_s: float) -> list[Delivery]:
        assert (deployment_id, consumer) == (7, "worker-a")
        self.takes.append((max_items, wait_s))
        deadline = time.monotonic() + wait_s
        while not self._visible() and time.monotonic() < deadline:
            time.sleep(0.002)
        taken = self.pending[: min(self._visible(), max_items)]
        del self.pending[: len(taken)]
        return [Delivery(r, tag=r.id) for _, r in taken]


def req(rows: int = 1) -> InferenceRequest:
    return InferenceRequest(7, 1, {"x": np.zeros((rows, 4), np.float32)})


def former_over(arrivals) -> tuple[BatchFormer, ArrivalsQueue]:
    queue = ArrivalsQueue(arrivals)
    return BatchFormer(queue, 7, "worker-a"), queue


def ids(batch: list[Delivery]) -> list[str]:
    return [d.request.id for d in batch]


def timed(fn):
    start = time.monotonic()
    result = fn()
    return result, time.monotonic() - start


def test_a_full_batch_leaves_at_once_and_is_capped_at_the_policy_size():
    requests = [req() for _ in range(10)]
    former, queue = former_over([(0.0, r) for r in requests])
    policy = BatchPolicy(4, max_queue_delay_s=5.0)
    first, elapsed = timed(lambda: former.next_batch(policy, LAYOUT, idle_wait_s=1.0))
    assert ids(first) == [r.id for r in requests[:4]]
    assert elapsed < SLACK_S  # full: it never waited for the 5 s delay
    assert ids(former.next_batch(policy, LAYOUT, 1.0)) == [r.id for r in requests[4:8]]
    assert all(max_items <= 4 for max_items, _ in queue.takes)


@pytest.mark.parametrize("delay_s", [0.0, 0.15])
def test_a_lone_request_leaves_after_the_queue_delay(delay_s):
    lone = req()
    former, _ = former_over([(0.0, lone)])
    batch, elapsed = timed(lambda: former.next_batch(BatchPolicy(8, delay_s), LAYOUT, idle_wait_s=1.0))
    assert ids(batch) == [lone.id]
    assert delay_s - NOISE_S <= elapsed < delay_s + SLACK_S


def test_an_empty_queue_gives_an_empty_batch_after_the_idle_wait():
    former, queue = former_over([])
    batch, elapsed = timed(lambda: former.next_batch(BatchPolicy(8, 10.0), LAYOUT, idle_wait_s=0.1))
    assert batch == [] and 0.1 - NOISE_S <= elapsed < 0.1 + SLACK_S
    assert queue.takes == [(8, 0.1)]


def test_a_late_request_joins_within_the_delay_and_the_full_batch_leaves_early():
    early, late, too_late = req(), req(), req()
    former, _ = former_over([(0.0, early), (0.1, late), (3.0, too_late)])
    batch, elapsed = timed(lambda: former.next_batch(BatchPolicy(2, 2.0), LAYOUT, idle_wait_s=1.0))
    assert ids(batch) == [early.id, late.id]
    assert 0.1 - NOISE_S <= elapsed < 2.0  # left when full, not at the delay


def test_the_delay_counts_from_the_first_request_not_the_last():
    first, second, third = req(), req(), req()
    former, _ = former_over([(0.0, first), (0.1, second), (0.5, third)])
    batch, elapsed = timed(lambda: former.next_batch(BatchPolicy(8, 0.3), LAYOUT, idle_wait_s=1.0))
    assert ids(batch) == [first.id, second.id]
    assert 0.3 - NOISE_S <= elapsed < 0.3 + SLACK_S


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
    batch, elapsed = timed(lambda: former.next_batch(policy, None, 0.5))
    assert ids(batch) == [requests[0].id] and elapsed < SLACK_S
    assert ids(former.next_batch(policy, None, 0.5)) == [requests[1].id]
    assert all(max_items == 1 for max_items, _ in queue.takes)


def test_capacity_is_the_smallest_of_policy_symbol_and_buckets():
    assert batch_capacity(BatchPolicy(32, 0), BatchLayout("b", 1, 16)) == 16
    assert batch_capacity(BatchPolicy(32, 0), BatchLayout("b", 1, 64, (4, 8))) == 8
    assert batch_capacity(BatchPolicy(3, 0), BatchLayout("b", 1, 64, (4, 8))) == 3
    assert batch_capacity(BatchPolicy(3, 0), None) == 1
