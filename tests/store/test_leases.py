"""The lease row on SQLite and PostgreSQL: one holder at a time, renewed by it, taken by another only once
expired, released at once; times are given, so expiries are exact."""

from __future__ import annotations

import threading

import pytest

from luminal.store.leases import holder_of, release, try_hold

LEASE_S = 10.0


def hold(db, holder: str, now: float) -> bool:
    with db.session() as session:
        return try_hold(session, "provisioner", holder, now, LEASE_S)


def test_first_contender_holds_and_the_other_waits_for_the_expiry(db):
    assert hold(db, "a", 100.0)
    assert not hold(db, "b", 100.0)
    assert not hold(db, "b", 109.9)
    assert hold(db, "a", 105.0)  # renewed: now until 115
    assert not hold(db, "b", 114.9)
    assert hold(db, "b", 115.0)  # a stopped renewing: expired, taken
    assert not hold(db, "a", 116.0)  # a came back: it has lost the lease
    with db.session() as session:
        assert holder_of(session, "provisioner", 116.0) == "b"
        assert holder_of(session, "provisioner", 125.0) is None


def test_a_released_lease_is_taken_at_once(db):
    assert hold(db, "a", 100.0)
    with db.session() as session:
        release(session, "provisioner", "b")  # not b's to release
    assert not hold(db, "b", 101.0)
    with db.session() as session:
        release(session, "provisioner", "a")
    assert hold(db, "b", 101.0)


def test_leases_are_independent_by_name(db):
    assert hold(db, "a", 100.0)
    with db.session() as session:
        assert try_hold(session, "other", "b", 100.0, LEASE_S)


def test_contenders_racing_for_a_new_lease_get_one_holder(db):
    results: dict[str, bool] = {}
    barrier = threading.Barrier(4)

    def contend(name: str) -> None:
        barrier.wait()
        results[name] = hold(db, name, 100.0)

    threads = [threading.Thread(target=contend, args=(f"g{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results.values()) == 1, results


def test_a_lease_lasts_a_positive_time(db):
    with db.session() as session, pytest.raises(ValueError, match="positive"):
        try_hold(session, "provisioner", "a", 100.0, 0.0)
