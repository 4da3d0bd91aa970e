"""`CeleryCompileRunner`: the gateway's side of compile jobs on Celery (`LUMINAL_COMPILE_RUNNER=celery`). It only
sends tasks by name; `luminal compile-worker` processes run them (scheduler/compile_tasks.py) and record the
outcome in the metadata store, where the gateway reads it as it does for in-process compiles."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from luminal.scheduler.compile_tasks import QUEUE, TASK_NAME, CeleryCompileConfig, make_celery_app
from luminal.store import deployments as deployment_store
from luminal.store.database import Database

log = logging.getLogger(__name__)


class CeleryCompileRunner:
    def __init__(self, db: Database, config: CeleryCompileConfig):
        self.db = db
        self._app = make_celery_app(config)
        # Publishing is a blocking Redis call (with retries when Redis is down): off the gateway's event loop.
        self._publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compile-publish")
        self._submitted: set[int] = set()

    def submit(self, deployment_id: int) -> None:
        self._submitted.add(deployment_id)
        self._publisher.submit(self._publish, deployment_id)

    def _publish(self, deployment_id: int) -> None:
        try:
            self._app.send_task(TASK_NAME, args=[deployment_id], queue=QUEUE)
        except Exception:  # the deployment stays `compiling`; the next gateway start submits it again
            log.exception("could not send the compile of deployment %s to the Celery broker", deployment_id)

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every deployment submitted here has left `compiling` (the workers record it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._submitted and (deadline is None or time.monotonic() < deadline):
            with self.db.session() as session:
                for deployment_id in list(self._submitted):
                    row = deployment_store.load_for_compile(session, deployment_id)
                    if row is None or row.status != deployment_store.COMPILING:
                        self._submitted.discard(deployment_id)
            if self._submitted:
                time.sleep(0.1)

    def shutdown(self) -> None:
        self._publisher.shutdown(wait=True)
        self._app.close()
