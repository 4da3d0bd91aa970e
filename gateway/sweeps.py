"""The gateway's periodic clean-up, so storage stays bounded without an operator:

- finished predictions (their stored outputs included) are deleted `prediction_retention_s` after they finished;
- blobs no model version, deployment or prediction references are deleted once older than `orphan_grace_s`:
  a crash between the artifact store and the database (a blob stored, its row never committed; a row deleted,
  its blob not yet removed) leaves them, and the grace period spares a blob whose row is being committed;
- spool files and compile folders older than the grace period, which a killed upload or compile left behind.

Each sweep is one function taking `now` (epoch seconds), so tests step time instead of waiting; `Sweeper` calls
them every `sweep_interval_s`. Several gateway replicas may sweep the same store at once: every deletion is
idempotent, and a blob is deleted only when its row is gone first.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import anyio.to_thread

from luminal.store import models as model_store
from luminal.store import predictions as prediction_store
from luminal.store.artifacts import ArtifactStore
from luminal.store.database import Database
from luminal.store.settings import Settings

log = logging.getLogger(__name__)
BATCH = 500  # rows or keys per transaction: short transactions, and IN lists every database takes


def _batches(items: Iterator[str] | list[str], size: int = BATCH) -> Iterator[list[str]]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


def _delete_unreferenced(db: Database, artifacts: ArtifactStore, keys: list[str], stored_before: float) -> int:
    """Delete the blobs among `keys` that no row references now and that were stored before `stored_before`;
    returns how many. The age is checked again after the references: storing a blob refreshes its time before
    its row commits, so a blob being adopted by an upload right now is spared."""
    deleted = 0
    for batch in _batches(sorted(set(keys))):
        with db.session() as session:
            unused = model_store.unreferenced(session, set(batch))
        deleted += sum(artifacts.delete_if_stored_before(key, stored_before) for key in unused)
    return deleted


def sweep_expired_predictions(db: Database, artifacts: ArtifactStore, retention_s: float, now: float) -> int:
    """Delete predictions finished more than `retention_s` before `now`, and their outputs' blobs; returns how
    many predictions were deleted."""
    cutoff = dt.datetime.fromtimestamp(now - retention_s, dt.UTC)
    total = 0
    while True:
        with db.session() as session:  # committed before any blob goes: a crash here leaves only orphans
            count, keys = prediction_store.delete_finished_before(session, cutoff, BATCH)
        _delete_unreferenced(db, artifacts, keys, stored_before=now)
        total += count
        if count < BATCH:
            return total


def sweep_orphaned_artifacts(db: Database, artifacts: ArtifactStore, grace_s: float, now: float) -> int:
    """Delete blobs stored more than `grace_s` before `now` that nothing references; returns how many."""
    cutoff = now - grace_s
    old = [key for key, stored_at in artifacts.stored() if stored_at < cutoff]
    return _delete_unreferenced(db, artifacts, old, stored_before=cutoff)


def sweep_stale_spool(spool_dir: Path, grace_s: float, now: float) -> int:
    """Delete what a killed upload or compile left in the spool folder (files and temporary folders older than
    `grace_s`; a live upload writes to its file continually, so it stays young); returns how many entries."""
    if not spool_dir.is_dir():
        return 0
    removed = 0
    for path in spool_dir.iterdir():
        try:
            if path.stat().st_mtime >= now - grace_s:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed += 1
        except FileNotFoundError:  # its owner finished and removed it meanwhile
            continue
    return removed


@dataclass(frozen=True)
class SweepPolicy:
    retention_s: float
    grace_s: float
    interval_s: float


class Sweeper:
    """Runs the sweeps every `policy.interval_s` in a worker thread, starting one interval after the start (a
    gateway that restarts often still sweeps: the interval is minutes). A failed sweep is logged and retried at
    the next interval."""

    def __init__(
        self,
        db: Database,
        artifacts: ArtifactStore,
        spool_dir: Path,
        policy: SweepPolicy,
        clock: Callable[[], float] = time.time,
    ):
        self.db, self.artifacts, self.spool_dir, self.policy, self.clock = db, artifacts, spool_dir, policy, clock
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, settings: Settings, db: Database, artifacts: ArtifactStore) -> Sweeper:
        policy = SweepPolicy(settings.prediction_retention_s, settings.orphan_grace_s, settings.sweep_interval_s)
        return cls(db, artifacts, settings.spool_dir, policy)

    def sweep_once(self) -> None:
        now, p = self.clock(), self.policy
        predictions = sweep_expired_predictions(self.db, self.artifacts, p.retention_s, now)
        orphans = sweep_orphaned_artifacts(self.db, self.artifacts, p.grace_s, now)
        spool = sweep_stale_spool(self.spool_dir, p.grace_s, now)
        if predictions or orphans or spool:
            log.info(
                "swept %d expired predictions, %d orphaned artifacts, %d spool entries", predictions, orphans, spool
            )

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="sweeps")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.policy.interval_s)
            try:
                await anyio.to_thread.run_sync(self.sweep_once)
            except Exception:
                log.exception("a sweep failed; the next runs in %s s", self.policy.interval_s)
