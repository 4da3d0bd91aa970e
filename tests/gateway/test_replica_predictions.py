"""Several gateways on one database (SQLite and PostgreSQL): each prediction records the replica that runs it; a
start fails only its own replica's earlier predictions and those of replicas whose heartbeat expired, never a
live replica's; a replica that dies has its predictions failed by the others once its heartbeat expires."""

from __future__ import annotations

import time

from sqlalchemy import select

from luminal.gateway.app import start_platform, stop_platform
from luminal.gateway.replicas import HEARTBEAT_TIMEOUT_S, ReplicaHeartbeat, replica_id
from luminal.store import predictions as prediction_store
from luminal.store.clock import ManualClock
from luminal.store.tables import Prediction, Tenant

INTERRUPTED = prediction_store.INTERRUPTED


def running_prediction(db, owner: str | None) -> str:
    with db.session() as s:
        tenant_id = s.scalars(select(Tenant.id)).first()
        if tenant_id is None:
            s.add(Tenant(name="acme"))
            s.flush()
            tenant_id = s.scalars(select(Tenant.id)).one()
        spec = prediction_store.PredictionSpec(tenant_id, None, "tiny", 1, owner=owner)
        prediction_id = prediction_store.create_prediction(s, spec).id
        prediction_store.mark_running(s, prediction_id)
    return prediction_id


def statuses(db, *ids: str) -> list[tuple[str, str | None]]:
    with db.session() as s:
        rows = [s.get(Prediction, p) for p in ids]
        return [(r.status, r.error) for r in rows]


RUNNING = ("running", None)
FAILED = ("failed", INTERRUPTED)


def test_a_dead_replicas_predictions_are_taken_over_once_its_heartbeat_expires(db):
    clock = ManualClock()
    a = ReplicaHeartbeat(db, "a", clock=clock)
    b = ReplicaHeartbeat(db, "b", clock=clock)
    a.beat(own_earlier=True)
    of_a, legacy = running_prediction(db, "a"), running_prediction(db, None)
    assert b.beat(own_earlier=True) == 1  # b starts: only the prediction no live replica owns is failed
    of_b = running_prediction(db, "b")
    assert statuses(db, of_a, of_b, legacy) == [RUNNING, RUNNING, FAILED]
    clock.advance(HEARTBEAT_TIMEOUT_S - 1)  # a died just after its last beat; not yet expired
    assert b.beat() == 0 and statuses(db, of_a, of_b) == [RUNNING, RUNNING]
    clock.advance(1)
    assert b.beat() == 1 and statuses(db, of_a, of_b) == [FAILED, RUNNING]


def test_a_restarted_replica_fails_its_own_earlier_predictions_at_once(db):
    clock = ManualClock()
    a, b = ReplicaHeartbeat(db, "a", clock=clock), ReplicaHeartbeat(db, "b", clock=clock)
    a.beat(), b.beat()
    of_a, of_b = running_prediction(db, "a"), running_prediction(db, "b")
    clock.advance(1)
    restarted = ReplicaHeartbeat(db, "a", clock=clock)  # the same replica id: its earlier process is gone
    assert restarted.beat(own_earlier=True) == 1
    assert statuses(db, of_a, of_b) == [FAILED, RUNNING]
    later = running_prediction(db, "a")  # what the restarted process runs now is its own, and live
    assert restarted.beat() == 0 and statuses(db, later) == [RUNNING]


def test_the_replica_id_is_configured_or_kept_in_the_data_dir(settings):
    settings.data_dir.mkdir(parents=True)
    made = replica_id(settings)
    assert made and replica_id(settings) == made  # kept: a restart is the same replica
    assert replica_id(settings.model_copy(update={"gateway_id": "gw-0"})) == "gw-0"


class AheadClock:
    """The real clock, `ahead_s` in the future: another replica's view once time has passed."""

    def __init__(self, ahead_s: float):
        self.ahead_s = ahead_s

    def time(self) -> float:
        return time.time() + self.ahead_s


def test_two_platforms_on_one_database_keep_each_others_predictions(settings, tmp_path):
    other_settings = settings.model_copy(update={"data_dir": tmp_path / "data-b"})
    first = start_platform(settings)
    try:
        first_id = first.heartbeat.replica_id
        assert first.predictions.owner == first_id
        of_first = running_prediction(first.db, first_id)
        second = start_platform(other_settings)  # a second gateway starts: the first's prediction lives on
        try:
            assert second.heartbeat.replica_id != first_id
            assert statuses(second.db, of_first) == [RUNNING]
            of_second = running_prediction(second.db, second.heartbeat.replica_id)
            first.heartbeat.stop()  # the first gateway dies: its heartbeat stops
            second.heartbeat.clock = AheadClock(HEARTBEAT_TIMEOUT_S + 1)  # and time passes
            assert second.heartbeat.beat() == 1
            assert statuses(second.db, of_first, of_second) == [FAILED, RUNNING]
        finally:
            stop_platform(second)
    finally:
        stop_platform(first)
