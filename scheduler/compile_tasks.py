"""Compile jobs as Celery tasks on the Redis broker: the app both sides configure alike, and the task a
`luminal compile-worker` runs.

Delivery is at least once, the outcome recorded once. The task is acknowledged late (when the compile has ended),
so a worker that dies mid-compile leaves its message unacknowledged in Redis; after the visibility timeout another
worker restores and runs it. The task is idempotent: it compiles only a deployment still `compiling` and records
its outcome with a compare-and-set (compile_outcome.py), so a redelivered task whose first run finished does
nothing, one whose first run died compiles again, and of two overlapping runs the first outcome wins. A compile
that kills its worker every time is failed after `max_attempts` deliveries (counted in Redis), not redelivered
forever. Celery is imported only here, and only when the celery runner or a compile worker is used.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from luminal.scheduler.compile_jobs import compile_deployment
from luminal.scheduler.compile_outcome import record_outcome
from luminal.store import deployments as deployment_store
from luminal.store.artifacts import ArtifactLocation, ArtifactStore
from luminal.store.database import Database

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)
TASK_NAME = "luminal.compile_deployment"
QUEUE = "luminal-compile"
# Test-only: when set to a folder, the task writes `started-<deployment>-<pid>` there and then waits while a file
# `hold` exists in it, so a test can SIGKILL a worker in the middle of a compile without racing a sleep.
TEST_HOLD_ENV = "LUMINAL_COMPILE_TEST_HOLD_DIR"
ATTEMPTS_TTL_S = 7 * 86400  # a counter outlives any redelivery of its job, then expires if the job vanished


@dataclass(frozen=True)
class CeleryCompileConfig:
    broker_url: str  # redis://host:port/db
    namespace: str  # prefixes every key Celery and the attempt counters write, as the request queues' keys
    visibility_timeout_s: float
    max_attempts: int

    @classmethod
    def from_settings(cls, settings) -> CeleryCompileConfig:
        """From the platform's `Settings` (the gateway's and `luminal compile-worker`'s, read alike)."""
        return cls(
            broker_url=settings.resolved_compile_broker_url,
            namespace=settings.queue_namespace,
            visibility_timeout_s=settings.compile_visibility_timeout_s,
            max_attempts=settings.compile_max_attempts,
        )

    @property
    def attempts_prefix(self) -> str:
        return f"{self.namespace}:compile-attempts:"


def make_celery_app(config: CeleryCompileConfig) -> Celery:
    from celery import Celery

    if not config.broker_url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(
            "compile jobs on Celery need a Redis broker: set LUMINAL_COMPILE_BROKER_URL or LUMINAL_QUEUE_URL"
        )
    app = Celery("luminal-compile", broker=config.broker_url, set_as_current=False)
    # Redis's sweep for abandoned messages runs every `interval`; a tenth of the timeout keeps a redelivery's
    # delay near the timeout itself without scanning Redis often.
    restore_interval = max(1.0, min(60.0, config.visibility_timeout_s / 10))
    app.conf.update(
        task_acks_late=True,  # acknowledged after the compile, so a dead worker's task is redelivered
        task_reject_on_worker_lost=True,  # a pool child killed mid-task: requeued at once, not acked as failed
        task_acks_on_failure_or_timeout=True,  # a task that raised is not redelivered forever (the job records it)
        worker_prefetch_multiplier=1,  # compiles are long: a worker reserves only the task it runs
        task_ignore_result=True,  # the outcome is the deployment's state in the metadata store
        task_default_queue=QUEUE,
        worker_enable_remote_control=False,  # no pidbox broadcasts: nothing here inspects workers remotely
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": config.visibility_timeout_s,
            "global_keyprefix": f"{config.namespace}:celery:",
            "unacked_restore_interval": restore_interval,
            "unacked_restore_throttle": 1,
        },
    )
    return app


class WorkerStores:
    """The metadata store and artifacts a worker process compiles against, opened on its first task (after the
    prefork pool forked it: an engine must not cross a fork)."""

    def __init__(self, database_url: str, artifacts: ArtifactLocation, spool_dir: Path):
        self.database_url, self.artifact_location, self.spool_dir = database_url, artifacts, spool_dir
        self._db: Database | None = None

    @property
    def db(self) -> Database:
        if self._db is None:
            self._db = Database(self.database_url)
        return self._db

    def artifacts(self) -> ArtifactStore:
        return self.artifact_location.open()  # the local directory, or S3 through this machine's cache


def register_compile_task(app: Celery, config: CeleryCompileConfig, stores: WorkerStores) -> None:
    """Give `app` the task body (only workers need it; the gateway sends by name)."""
    import redis

    counters = redis.Redis.from_url(config.broker_url)

    @app.task(name=TASK_NAME)
    def compile_task(deployment_id: int) -> None:
        run_compile(stores, counters, config, deployment_id)


def run_compile(stores: WorkerStores, counters, config: CeleryCompileConfig, deployment_id: int) -> None:
    """One delivery of a compile job: counted, then compiled unless its deployment is no longer `compiling`."""
    if not _still_compiling(stores.db, deployment_id):
        return  # deleted, or finished by an earlier delivery: the redelivery of a finished job does nothing
    key = f"{config.attempts_prefix}{deployment_id}"
    attempt = int(counters.incr(key))
    counters.expire(key, ATTEMPTS_TTL_S)
    if attempt > config.max_attempts:
        reason = f"WorkerLost: the compile's worker died during {attempt - 1} earlier attempt(s) (out of memory?)"
        with stores.db.session() as session:
            record_outcome(session, deployment_id, None, reason)
        counters.delete(key)
        return
    _hold_for_tests(deployment_id)
    try:
        compile_deployment(stores.db, stores.artifacts(), deployment_id, stores.spool_dir)
    finally:
        counters.delete(key)  # an ended compile (whatever its outcome) starts its count afresh if ever rerun


def _still_compiling(db: Database, deployment_id: int) -> bool:
    with db.session() as session:
        row = deployment_store.load_for_compile(session, deployment_id)
        return row is not None and row.status == deployment_store.COMPILING


def _hold_for_tests(deployment_id: int) -> None:
    folder = os.environ.get(TEST_HOLD_ENV)
    if not folder:
        return
    Path(folder, f"started-{deployment_id}-{os.getpid()}").touch()
    while Path(folder, "hold").exists():
        time.sleep(0.05)
