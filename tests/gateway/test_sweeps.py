"""The retention and orphan sweeps on SQLite and PostgreSQL, with time stepped through `now` (nothing sleeps):
expired predictions and their blobs go, unfinished and recent ones stay, a blob shared with a kept row stays;
orphaned blobs go only past the grace period, and storing a blob again restarts its grace."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from pathlib import Path

import pytest
from sqlalchemy import select, update

from luminal.gateway.sweeps import (
    Sweeper,
    SweepPolicy,
    sweep_expired_predictions,
    sweep_orphaned_artifacts,
    sweep_stale_spool,
)
from luminal.store import models as model_store
from luminal.store import predictions as prediction_store
from luminal.store.artifacts import LocalArtifactStore
from luminal.store.database import Database
from luminal.store.models import UploadedGraph
from luminal.store.tables import Prediction, Tenant
from luminal.store.tenants import create_tenant

HOUR = 3600.0
T0 = 1_800_000_000.0  # an epoch second in 2027: every row and file below is dated from it


@pytest.fixture
def artifacts(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


@pytest.fixture
def tenant(db: Database) -> Tenant:
    with db.session() as session:
        return create_tenant(session, "acme")[0]


def blob(artifacts: LocalArtifactStore, data: bytes, stored_at: float) -> str:
    key = artifacts.put_bytes(data)
    os.utime(artifacts.local_path(key), (stored_at, stored_at))
    return key


def prediction(db: Database, tenant: Tenant, status: str, completed_at: float | None, output_key=None) -> str:
    with db.session() as session:
        row = prediction_store.create_prediction(session, prediction_store.PredictionSpec(tenant.id, None, "m", 1))
        when = None if completed_at is None else dt.datetime.fromtimestamp(completed_at, dt.UTC)
        values = {"status": status, "completed_at": when, "output_key": output_key}
        session.execute(update(Prediction).where(Prediction.id == row.id).values(**values))
        return row.id


def remaining(db: Database) -> set[str]:
    with db.session() as session:
        return set(session.scalars(select(Prediction.id)))


def test_expired_predictions_and_their_outputs_are_deleted(db, artifacts, tenant):
    only_old, shared = blob(artifacts, b"old output", T0), blob(artifacts, b"shared output", T0)
    old = prediction(db, tenant, "succeeded", T0, only_old)
    old_shared = prediction(db, tenant, "succeeded", T0, shared)
    old_failed = prediction(db, tenant, "failed", T0)
    recent = prediction(db, tenant, "succeeded", T0 + 2 * HOUR, shared)
    running = prediction(db, tenant, "running", None)
    assert sweep_expired_predictions(db, artifacts, HOUR, now=T0 + HOUR) == 0  # exactly at the limit: kept
    assert remaining(db) == {old, old_shared, old_failed, recent, running}
    assert sweep_expired_predictions(db, artifacts, HOUR, now=T0 + 2 * HOUR) == 3
    assert remaining(db) == {recent, running}
    assert not artifacts.exists(only_old)
    assert artifacts.exists(shared)  # the recent prediction still points at it


def test_the_sweep_deletes_past_one_batch(db, artifacts, tenant, monkeypatch):
    monkeypatch.setattr("luminal.gateway.sweeps.BATCH", 2)
    for _ in range(5):
        prediction(db, tenant, "succeeded", T0)
    assert sweep_expired_predictions(db, artifacts, HOUR, now=T0 + 2 * HOUR) == 5
    assert remaining(db) == set()


def test_orphaned_blobs_are_deleted_after_the_grace_period(db, artifacts, tenant):
    graph_key = blob(artifacts, b"a graph", T0)
    output_key = blob(artifacts, b"an output", T0)
    orphan = blob(artifacts, b"stored, never recorded", T0)
    young_orphan = blob(artifacts, b"an upload being recorded", T0 + 50 * 60)
    with db.session() as session:
        model_store.add_version(session, tenant, "m", UploadedGraph(graph_key, 7, graph_key, {}, {}))
    prediction(db, tenant, "succeeded", T0, output_key)
    assert sweep_orphaned_artifacts(db, artifacts, HOUR, now=T0 + HOUR) == 0  # nothing older than an hour yet
    assert sweep_orphaned_artifacts(db, artifacts, HOUR, now=T0 + HOUR + 1) == 1
    assert not artifacts.exists(orphan)
    assert all(artifacts.exists(k) for k in (graph_key, output_key, young_orphan))


def test_storing_a_blob_again_restarts_its_grace(db, artifacts):
    # An upload of bytes whose blob a crash orphaned reuses that blob: it must not be swept before its row commits.
    orphan = blob(artifacts, b"orphaned, then uploaded again", T0)
    assert artifacts.put_bytes(b"orphaned, then uploaded again") == orphan
    assert sweep_orphaned_artifacts(db, artifacts, HOUR, now=time.time() + 60) == 0
    assert artifacts.exists(orphan)


def test_stale_spool_entries_are_deleted(tmp_path: Path):
    spool = tmp_path / "spool"
    (spool / "compile-dir").mkdir(parents=True)
    (spool / "compile-dir" / "program.lprog").write_bytes(b"half a program")
    (spool / "upload-killed.lgraph").write_bytes(b"half an upload")
    (spool / "upload-live.lgraph").write_bytes(b"arriving")
    for stale in ("compile-dir", "upload-killed.lgraph"):
        os.utime(spool / stale, (T0, T0))
    os.utime(spool / "upload-live.lgraph", (T0 + HOUR, T0 + HOUR))
    assert sweep_stale_spool(spool, HOUR, now=T0 + HOUR + 1) == 2
    assert [p.name for p in spool.iterdir()] == ["upload-live.lgraph"]
    assert sweep_stale_spool(tmp_path / "absent", HOUR, now=T0) == 0


def test_the_sweeper_runs_every_sweep_at_its_clock(db, artifacts, tenant, tmp_path: Path):
    orphan = blob(artifacts, b"orphan", T0)
    expired = prediction(db, tenant, "failed", T0)
    (tmp_path / "spool").mkdir()
    stale = tmp_path / "spool" / "upload-x.lgraph"
    stale.write_bytes(b"x")
    os.utime(stale, (T0, T0))
    sweeper = Sweeper(db, artifacts, tmp_path / "spool", SweepPolicy(HOUR, HOUR, 60), clock=lambda: T0 + 2 * HOUR)
    sweeper.sweep_once()
    assert expired not in remaining(db) and not artifacts.exists(orphan) and not stale.exists()


def test_the_sweeper_loop_sweeps_until_stopped(db, artifacts, tmp_path: Path):
    sweeper = Sweeper(db, artifacts, tmp_path / "spool", SweepPolicy(HOUR, HOUR, interval_s=0))
    calls: list[int] = []
    sweeper.sweep_once = lambda: calls.append(1)

    async def run() -> None:
        sweeper.start()
        while len(calls) < 2:
            await asyncio.sleep(0.01)
        await sweeper.stop()

    asyncio.run(run())
    assert len(calls) >= 2
