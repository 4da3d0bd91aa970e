"""Delivering a routed sequence (SequenceRequest.preferred_worker) in every sequence transport (in memory, and on
the Redis at LUMINAL_TEST_REDIS_URL): its worker takes it first; another worker takes it only after the grace, or
at once when its worker is gone from the load reports, reported long ago, or has more waiting for it than free
rows; a sequence for a LoRA adapter its worker holds goes, past the grace, only to another worker holding it, unless
its worker is gone; priorities still order what a worker may take; a cancel and a take keep each worker's backlog
true."""

from __future__ import annotations

import dataclasses
import time

import pytest

from luminal.scheduler.sequences.request import WorkerLoad
from luminal.scheduler.sequences.routing import PREFERENCE_GRACE_S, REPORT_STALE_S
from tests.scheduler.queue_fixtures import redis_namespace  # noqa: F401 (a fixture)
from tests.scheduler.test_sequence_transport import DEPLOYMENT, sequence, transport  # noqa: F401 (a fixture)


def routed(to: str | None, priority: int = 5, **params):
    return dataclasses.replace(sequence(priority, **params), preferred_worker=to)


def report(transport, worker: str, free_rows: int | None = 4, reported_at: float | None = None, adapters=()) -> None:  # noqa: F811
    load = WorkerLoad(0, 0, 64, time.time() if reported_at is None else reported_at, free_rows, adapters=adapters)
    transport.report(DEPLOYMENT, worker, load)


def ids(requests) -> list[str]:
    return [r.id for r in requests]


def test_a_routed_sequence_waits_for_its_worker_through_the_grace(transport):  # noqa: F811
    report(transport, "w1")
    report(transport, "w2")
    mine, anyones = routed("w1"), routed(None)
    transport.submit(mine, max_waiting=8)
    transport.submit(anyones, max_waiting=8)
    assert transport.backlog(DEPLOYMENT) == {"w1": 1}
    assert ids(transport.take(DEPLOYMENT, "w2", 4, 0.0)) == [anyones.id]  # not w1's, within its grace
    assert ids(transport.take(DEPLOYMENT, "w1", 4, 0.0)) == [mine.id]
    assert transport.backlog(DEPLOYMENT) == {}


def test_another_worker_takes_it_once_the_grace_ends(transport):  # noqa: F811
    report(transport, "w1")
    report(transport, "w2")
    late = routed("w1")
    transport.submit(late, max_waiting=8)
    began = time.monotonic()
    assert ids(transport.take(DEPLOYMENT, "w2", 4, 5.0)) == [late.id]  # the take waited for the grace to end
    assert PREFERENCE_GRACE_S - 0.1 <= time.monotonic() - began < 5.0
    assert transport.backlog(DEPLOYMENT) == {} and transport.in_flight(DEPLOYMENT) == 1


@pytest.mark.parametrize("gone", ["never reported", "stopped", "stale"])
def test_a_gone_workers_sequence_is_taken_at_once(transport, gone):  # noqa: F811
    report(transport, "w2")
    if gone == "stopped":
        report(transport, "w1")
        transport.report(DEPLOYMENT, "w1", None)
    elif gone == "stale":
        report(transport, "w1", reported_at=time.time() - REPORT_STALE_S - 1)
    stranded = routed("w1")
    transport.submit(stranded, max_waiting=8)
    assert ids(transport.take(DEPLOYMENT, "w2", 4, 0.0)) == [stranded.id]


def test_sequences_beyond_a_workers_free_rows_go_to_another_at_once(transport):  # noqa: F811
    report(transport, "w1", free_rows=1)
    report(transport, "w2")
    first, second = routed("w1"), routed("w1")
    transport.submit(first, max_waiting=8)
    assert transport.take(DEPLOYMENT, "w2", 4, 0.0) == []  # one waits for w1: it has a row for it
    transport.submit(second, max_waiting=8)
    assert len(transport.take(DEPLOYMENT, "w2", 4, 0.0)) == 2  # two wait for one row: w1 is overloaded
    assert transport.backlog(DEPLOYMENT) == {}


def test_priorities_order_what_a_worker_may_take(transport):  # noqa: F811
    report(transport, "w1")
    report(transport, "w2")
    others, low, urgent, own = routed("w2", 1), routed(None, 9), routed(None, 2), routed("w1", 5)
    for s in (others, low, urgent, own):
        transport.submit(s, max_waiting=8)
    assert ids(transport.take(DEPLOYMENT, "w1", 4, 0.0)) == [urgent.id, own.id, low.id]
    assert ids(transport.take(DEPLOYMENT, "w2", 4, 0.0)) == [others.id]


def test_a_cancelled_routed_sequence_leaves_the_backlog(transport):  # noqa: F811
    report(transport, "w1")
    gone, kept = routed("w1"), routed("w1")
    transport.submit(gone, max_waiting=2)
    transport.submit(kept, max_waiting=2)
    transport.cancel(gone.id)
    assert transport.backlog(DEPLOYMENT) == {"w1": 1} and transport.depth(DEPLOYMENT) == 1
    assert ids(transport.take(DEPLOYMENT, "w1", 4, 0.0)) == [kept.id]


def test_past_its_grace_an_adapters_sequence_goes_only_to_another_holder(transport):  # noqa: F811
    report(transport, "w1", adapters=(("sql", "lora:1"),))
    report(transport, "w2")
    report(transport, "w3", adapters=(("sql", "lora:2"),))
    held, base = routed("w1", lora="sql"), routed("w1")
    transport.submit(held, max_waiting=8)
    transport.submit(base, max_waiting=8)
    assert ids(transport.take(DEPLOYMENT, "w2", 4, PREFERENCE_GRACE_S + 0.3)) == [base.id]  # w2 lacks the adapter
    assert transport.take(DEPLOYMENT, "w2", 4, 0.0) == []
    assert ids(transport.take(DEPLOYMENT, "w3", 4, 0.0)) == [held.id]  # it holds it too


@pytest.mark.parametrize("why", ["its worker stopped", "its worker held none"])
def test_an_adapters_sequence_goes_to_any_worker_when_its_own_cannot_serve_it(transport, why):  # noqa: F811
    report(transport, "w2")
    if why == "its worker stopped":
        report(transport, "w1", adapters=(("sql", "lora:1"),))
        transport.report(DEPLOYMENT, "w1", None)
    else:  # routed while nobody held it: waiting for w1 would only strand it
        report(transport, "w1")
    stranded = routed("w1", lora="sql")
    transport.submit(stranded, max_waiting=8)
    assert ids(transport.take(DEPLOYMENT, "w2", 4, PREFERENCE_GRACE_S + 2.0)) == [stranded.id]
