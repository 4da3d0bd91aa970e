"""Compile jobs: a deployment's model version compiled for its target, the program stored as an artifact, and
the outcome (`ready`, or `failed` with the compiler's message) written back to the deployment.

The runner is an interface so a Celery runner can take the jobs in the distributed setup; the embedded default
runs them on a small thread pool in this process (the compiler's heavy parts, the egglog search and the C
build, run in child processes or release the GIL).
"""

from __future__ import annotations

import logging
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Protocol

import luminal as lm
from luminal.compiler.artifact import save_program
from luminal.gateway.store import deployments as deployment_store
from luminal.gateway.store.artifacts import ArtifactStore, sha256_file
from luminal.gateway.store.database import Database
from luminal.gateway.store.models import unreferenced

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 4000  # a compiler traceback can be long; the API shows its head


class CompileRunner(Protocol):
    def submit(self, deployment_id: int) -> None: ...

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every submitted job has finished (tests and shutdown use it)."""
        ...

    def shutdown(self) -> None: ...


def compile_deployment(db: Database, artifacts: ArtifactStore, deployment_id: int, spool_dir: Path) -> None:
    """Run one compile job to its end; every outcome, errors included, is recorded on the deployment."""
    with db.session() as session:
        row = deployment_store.load_for_compile(session, deployment_id)
        if row is None or row.status != deployment_store.COMPILING:
            return  # deleted, or finished by an earlier run of this job
        graph_key, target = row.model_version.artifact_key, row.target
    program_key, error = None, None
    try:
        graph = lm.load(artifacts.local_path(graph_key))
        program = lm.compile(graph, target=target)
        spool_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=spool_dir) as tmp:
            path = Path(tmp) / "program.lprog"
            save_program(program, path)
            program_key = artifacts.put_file(path, sha256_file(path))
    except Exception as e:  # any failure of the compiler is the deployment's error, shown to its owner
        log.info("compile of deployment %s failed", deployment_id, exc_info=True)
        error = f"{type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
    with db.session() as session:
        recorded = deployment_store.finish_compile(session, deployment_id, program_key, error)
        orphan = program_key is not None and not recorded and program_key in unreferenced(session, {program_key})
    if orphan:
        artifacts.delete(program_key)  # the deployment was deleted while compiling


class ThreadCompileRunner:
    def __init__(self, db: Database, artifacts: ArtifactStore, spool_dir: Path, workers: int = 1):
        self.db, self.artifacts, self.spool_dir = db, artifacts, spool_dir
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="compile")
        self._futures: set[Future] = set()

    def submit(self, deployment_id: int) -> None:
        future = self._pool.submit(compile_deployment, self.db, self.artifacts, deployment_id, self.spool_dir)
        self._futures.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future) -> None:
        self._futures.discard(future)
        if future.exception() is not None:  # only the database write itself can get here
            log.error("compile job crashed", exc_info=future.exception())

    def drain(self, timeout: float | None = None) -> None:
        wait(list(self._futures), timeout=timeout)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
