"""Compile jobs: a deployment's model version compiled for its target, the program stored as an artifact, and
the outcome (`ready`, or `failed` with the compiler's message) written back to the deployment.

The runner is an interface: `CeleryCompileRunner` (scheduler/compile_celery.py) sends the jobs to Celery workers in
the distributed setup (`LUMINAL_COMPILE_RUNNER=celery`). The embedded default,
`ProcessCompileRunner`, runs them in a small pool of child processes: a compile is seconds of CPU-bound Python
that would otherwise share the GIL with request handling, and a compiler crash (or the OOM killer) takes down a
child, which fails that one deployment with the reason, never the gateway. `ThreadCompileRunner` runs them in
this process (`LUMINAL_COMPILE_RUNNER=thread`), for debugging and for tests that patch the compiler.
"""

from __future__ import annotations

import logging
import multiprocessing
import tempfile
import threading
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Protocol

import luminal as lm
from luminal.compiler.artifact import save_program
from luminal.embedding_package import is_embedding_package, load_package
from luminal.llm_package import is_llm_package
from luminal.scheduler.compile_outcome import record_outcome
from luminal.scheduler.generation.language_model import compile_package
from luminal.store import deployments as deployment_store
from luminal.store.artifacts import ArtifactLocation, ArtifactStore, sha256_file
from luminal.store.database import Database
from luminal.store.models import unreferenced

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 4000  # a compiler traceback can be long; the API shows its head


class CompileRunner(Protocol):
    def submit(self, deployment_id: int) -> None: ...

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every submitted job has finished (tests and shutdown use it)."""
        ...

    def shutdown(self) -> None: ...


def compile_deployment(db: Database, artifacts: ArtifactStore, deployment_id: int, spool_dir: Path) -> None:
    """Run one compile job to its end; every outcome, errors included, is recorded on the deployment, once: a job
    that finds its deployment no longer `compiling` (deleted, or finished by an earlier run) does nothing, and of
    two overlapping runs only the first outcome is kept (see compile_outcome.py)."""
    with db.session() as session:
        row = deployment_store.load_for_compile(session, deployment_id)
        if row is None or row.status != deployment_store.COMPILING:
            return  # deleted, or finished by an earlier run of this job
        graph_key, target = row.model_version.artifact_key, row.target
    program_key, error = None, None
    try:
        spool_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=spool_dir) as tmp:
            path = Path(tmp) / "program"
            _compile_file(artifacts.local_path(graph_key), target, path)
            program_key = artifacts.put_file(path, sha256_file(path))
    except Exception as e:  # any failure of the compiler is the deployment's error, shown to its owner
        log.info("compile of deployment %s failed", deployment_id, exc_info=True)
        error = f"{type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
    with db.session() as session:
        recorded = record_outcome(session, deployment_id, program_key, error)
        orphan = program_key is not None and not recorded and program_key in unreferenced(session, {program_key})
    if orphan:
        artifacts.delete(program_key)  # deleted while compiling (or another run's program, stored under another key)


def _compile_file(source: Path, target: str, out: Path) -> None:
    """A `.lgraph` becomes one `.lprog`; an LLM package becomes an `.llmprog` (its prefill and step programs, and
    their weights once); an embedding package's graph becomes an `.lprog` (its tokenizer stays with the upload,
    where the gateway reads it)."""
    if is_llm_package(source):
        compile_package(source, target, out)
    elif is_embedding_package(source):
        save_program(lm.compile(load_package(source).graph, target=target), out)
    else:
        save_program(lm.compile(lm.load(source), target=target), out)


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


def _compile_in_child(database_url: str, artifacts: ArtifactLocation, spool_dir: str, deployment_id: int) -> None:
    """A compile job in a pool process: its own database engine and artifact store, from plain values."""
    db = Database(database_url)
    try:
        compile_deployment(db, artifacts.open(), deployment_id, Path(spool_dir))
    finally:
        db.dispose()


class ProcessCompileRunner:
    def __init__(self, db: Database, database_url: str, artifacts: ArtifactLocation, spool_dir: Path, workers: int = 1):
        self.db, self.database_url = db, database_url
        self.artifacts, self.spool_dir, self.workers = artifacts, spool_dir, workers
        self._pool: ProcessPoolExecutor | None = None  # started by the first job: a platform may never compile
        self._lock = threading.Condition()
        self._futures: set[Future] = set()  # until their outcome is recorded (after the future itself is done)

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn, not fork: the gateway has threads (and their locks) that a forked child would inherit.
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def submit(self, deployment_id: int) -> None:
        args = (self.database_url, self.artifacts, str(self.spool_dir), deployment_id)
        with self._lock:
            try:
                future = self._executor().submit(_compile_in_child, *args)
            except BrokenProcessPool:  # an earlier child died and took the pool with it: start a new one
                self._pool = None
                future = self._executor().submit(_compile_in_child, *args)
            self._futures.add(future)
        future.add_done_callback(lambda f: self._done(f, deployment_id))

    def _done(self, future: Future, deployment_id: int) -> None:
        try:
            error = None if future.cancelled() else future.exception()
            if error is not None:
                self._record_crash(deployment_id, error)
        finally:
            with self._lock:
                self._futures.discard(future)
                self._lock.notify_all()

    def _record_crash(self, deployment_id: int, error: BaseException) -> None:
        log.error("compile job of deployment %s crashed", deployment_id, exc_info=error)
        reason = "the compile process died (out of memory?)" if isinstance(error, BrokenProcessPool) else str(error)
        with self.db.session() as session:  # the job could not record its own outcome: record it here
            record_outcome(session, deployment_id, None, f"{type(error).__name__}: {reason}")

    def drain(self, timeout: float | None = None) -> None:
        with self._lock:
            self._lock.wait_for(lambda: not self._futures, timeout)

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
