"""Leases: a named role that one holder plays at a time (the provisioner, when several gateways share a
database). A lease row holds its holder and an expiry in wall-clock epoch seconds; its holder renews it before the
expiry, and another may take it only once it has expired, so a holder that dies hands the role on after at most
one lease time. Both steps are one conditional UPDATE (or an INSERT of the first row), atomic on SQLite (one
writer at a time) and PostgreSQL (the row's lock, the condition re-checked after it) alike: two contenders can
never both succeed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, or_, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from luminal.store.clock import SYSTEM_CLOCK, Clock
from luminal.store.database import Database
from luminal.store.tables import GatewayReplica, Lease

log = logging.getLogger(__name__)
PROVISIONER = "provisioner"
STARTUP_LOCK_KEY = 0x4C554D53  # "LUMS": the PostgreSQL advisory lock that gateways start under, one at a time


@contextmanager
def startup_lock(engine: Engine) -> Iterator[None]:
    """Gateways starting together on one PostgreSQL database migrate the schema and create the first tenant one
    at a time (else both create the same tables or tenant, and one start fails). A session-level advisory lock
    on its own connection, released at the end or when the process dies. SQLite: nothing (one host, one file)."""
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": STARTUP_LOCK_KEY})
        connection.commit()  # the lock outlives the transaction; the connection does not sit idle in one
        try:
            yield
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": STARTUP_LOCK_KEY})
            connection.commit()


def try_hold(session: Session, name: str, holder: str, now: float, lease_s: float) -> bool:
    """Renew `name` for `holder` until `now + lease_s` if it holds it, or take it if it is free or expired;
    whether `holder` now holds it."""
    if lease_s <= 0:
        raise ValueError(f"a lease lasts a positive time, not {lease_s}")
    taken = session.execute(
        update(Lease)
        .where(Lease.name == name, or_(Lease.holder == holder, Lease.expires_at <= now))
        .values(holder=holder, expires_at=now + lease_s)
    )
    if taken.rowcount:
        return True
    if session.get(Lease, name) is not None:
        return False  # held by another, not expired
    try:
        with session.begin_nested():  # another contender may insert the first row at the same moment
            session.add(Lease(name=name, holder=holder, expires_at=now + lease_s))
    except IntegrityError:
        return False
    return True


def release(session: Session, name: str, holder: str) -> None:
    """Give the lease up now (a graceful stop), so another takes it without waiting for its expiry."""
    session.execute(update(Lease).where(Lease.name == name, Lease.holder == holder).values(expires_at=0.0))


def holder_of(session: Session, name: str, now: float) -> str | None:
    lease = session.get(Lease, name)
    return lease.holder if lease is not None and lease.expires_at > now else None


def beat(session: Session, replica_id: str, now: float) -> None:
    """Record that gateway `replica_id` is alive at `now`."""
    row = session.get(GatewayReplica, replica_id)
    if row is None:
        session.add(GatewayReplica(id=replica_id, beat_at=now))
    else:
        row.beat_at = max(row.beat_at, now)
    session.flush()


def live_replicas(session: Session, now: float, timeout_s: float) -> set[str]:
    """The gateways whose last beat is younger than `timeout_s`."""
    return set(session.scalars(select(GatewayReplica.id).where(GatewayReplica.beat_at > now - timeout_s)))


def forget_dead_replicas(session: Session, now: float, timeout_s: float) -> None:
    session.execute(GatewayReplica.__table__.delete().where(GatewayReplica.beat_at <= now - timeout_s))


class LeaseKeeper:
    """One holder's side of a lease, asked before each act (`held()`): it renews the lease once half of it has
    passed and, while another holds it, tries again every `lease_s / 4`, so a tick is a database round trip only
    now and then. A failed renewal (the database unreachable) counts as not holding: the role stops at once,
    before the lease can expire and pass to another."""

    def __init__(self, db: Database, name: str, holder: str, lease_s: float = 10.0, clock: Clock = SYSTEM_CLOCK):
        if lease_s <= 0:
            raise ValueError(f"a lease lasts a positive time, not {lease_s}")
        self.db, self.name, self.holder, self.lease_s, self.clock = db, name, holder, lease_s, clock
        self._held_until = float("-inf")  # this holder's expiry as last written; -inf when not held
        self._next_try = float("-inf")

    def held(self) -> bool:
        now = self.clock.time()
        if now < self._held_until - self.lease_s / 2:
            return True
        if now < self._next_try:
            return now < self._held_until
        try:
            with self.db.session() as session:
                holds = try_hold(session, self.name, self.holder, now, self.lease_s)
        except Exception:
            log.exception("lease %s: could not renew it; acting as if lost", self.name)
            holds = False
        if holds != (self._held_until > now):
            log.info("lease %s: %s by %s", self.name, "taken" if holds else "lost", self.holder)
        self._held_until = now + self.lease_s if holds else float("-inf")
        self._next_try = now + self.lease_s / 4
        return holds

    def release(self) -> None:
        if self._held_until == float("-inf"):
            return
        self._held_until = float("-inf")
        try:
            with self.db.session() as session:
                release(session, self.name, self.holder)
        except Exception:  # it expires on its own
            log.exception("lease %s: could not release it", self.name)
