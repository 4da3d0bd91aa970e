"""Two provisioners (two gateways) on one database and one queue, SQLite and PostgreSQL: only the lease holder
scales; when it stops renewing (killed), the other takes over once the lease expires and never while it is held,
so the two never act in the same tick; the old holder, back, does nothing. One stepped clock drives both."""

from __future__ import annotations

from luminal.provisioner.provisioner import Provisioner, ProvisionerSettings
from luminal.scheduler.registry import open_registry
from luminal.store.clock import ManualClock
from luminal.store.leases import PROVISIONER, LeaseKeeper
from luminal.store.tables import Lease
from tests.provisioner.test_provisioner import SPEC, FakeBackend, FakeQueue

LEASE_S = 8.0
SETTINGS = ProvisionerSettings(target_per_replica=4, idle_to_zero_s=1000, scale_up_cooldown_s=0,
                               scale_down_cooldown_s=0, refresh_s=0)  # fmt: skip


def gateway(db, name: str, clock: ManualClock, queue: FakeQueue) -> tuple[Provisioner, FakeBackend]:
    backend = FakeBackend(clock)
    lease = LeaseKeeper(db, PROVISIONER, name, LEASE_S, clock)
    registry = open_registry(None, clock=clock)
    return Provisioner(lambda: [SPEC], queue, registry, backend, SETTINGS, clock, lease=lease), backend


def tick_both(a: Provisioner, b: Provisioner) -> tuple[bool, bool]:
    a.tick()
    b.tick()
    return a.acting(), b.acting()


def test_one_provisioner_acts_and_the_other_takes_over_after_the_lease_expires(db):
    clock, queue = ManualClock(), FakeQueue()
    (a, backend_a), (b, backend_b) = gateway(db, "a", clock, queue), gateway(db, "b", clock, queue)
    queue.queued = 5
    assert tick_both(a, b) == (True, False)
    assert len(backend_a.running()) == 2 and backend_b.started == []
    for _ in range(int(3 * LEASE_S)):  # a renews on its ticks: b never gets the lease
        clock.advance(1.0)
        assert tick_both(a, b) == (True, False)
    assert backend_b.started == []

    # a is killed: it ticks no more. Until its lease expires b still does nothing.
    for handle in backend_a.started:
        handle.running = False
    with db.session() as session:
        expires_at = session.get(Lease, PROVISIONER).expires_at
    acted_at = None
    for _ in range(int(4 * LEASE_S)):
        clock.advance(0.5)
        b.tick()
        if backend_b.started and acted_at is None:
            acted_at = clock.time()
    assert acted_at is not None and len(backend_b.running()) == 2
    # Never before a's lease expired; at b's first try after it (b tries every LEASE_S / 4).
    assert expires_at <= acted_at < expires_at + LEASE_S / 4 + 0.5

    # a comes back (a stalled process): it lost the lease and acts no more, while b goes on acting.
    queue.queued = 12
    started_by_a = len(backend_a.started)
    clock.advance(0.5)
    assert tick_both(a, b) == (False, True)
    assert len(backend_a.started) == started_by_a and len(backend_b.running()) == 3


def test_a_tick_that_outlives_its_lease_changes_nothing_once_another_took_it(db):
    clock, queue = ManualClock(), FakeQueue()
    (a, backend_a), (b, backend_b) = gateway(db, "a", clock, queue), gateway(db, "b", clock, queue)
    assert tick_both(a, b) == (True, False)  # nothing queued yet: no workers
    queue.queued = 5

    def slow_read():  # a's read of the deployments stalls past its lease, and b takes the lease meanwhile
        clock.advance(LEASE_S)
        b.tick()
        return [SPEC]

    a.ready_specs = slow_read
    a.tick()
    assert backend_a.started == [] and len(backend_b.running()) == 2
    assert not a.acting() and b.acting()


def test_a_closed_provisioner_hands_the_lease_on_at_once(db):
    clock, queue = ManualClock(), FakeQueue()
    (a, _), (b, backend_b) = gateway(db, "a", clock, queue), gateway(db, "b", clock, queue)
    queue.queued = 1
    assert tick_both(a, b) == (True, False)
    a.close()
    clock.advance(LEASE_S / 4)  # b's next try: well before a's lease would have expired
    b.tick()
    assert b.acting() and len(backend_b.running()) == 1


def test_a_provisioner_without_a_lease_always_acts(db):
    clock, queue = ManualClock(), FakeQueue()
    queue.queued = 1
    backend = FakeBackend(clock)
    provisioner = Provisioner(lambda: [SPEC], queue, open_registry(None, clock=clock), backend, SETTINGS, clock)
    provisioner.tick()
    assert provisioner.acting() and len(backend.running()) == 1
