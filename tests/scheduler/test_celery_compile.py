"""Compile jobs on Celery with the Redis broker, run by real `luminal compile-worker` processes: a deployment
compiled by a worker becomes ready and answers; a worker SIGKILLed mid-compile has its task redelivered to a
second worker and the job finishes once; a failing compile is recorded as failed and not redelivered; a compile
that keeps killing its worker is failed after its last allowed delivery.

Each test has a Redis key prefix of its own (deleted after) and a visibility timeout of 2 s, so a dead worker's
task is redelivered within seconds. A test-only hook (LUMINAL_COMPILE_TEST_HOLD_DIR, see compile_tasks.py) holds
the task before it compiles while a `hold` file exists, so a kill lands mid-compile without racing a sleep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

import luminal as lm
from luminal.gateway.app import create_app
from luminal.scheduler.compile_celery import CeleryCompileRunner
from luminal.scheduler.compile_outcome import record_outcome
from luminal.scheduler.compile_tasks import QUEUE, TEST_HOLD_ENV, CeleryCompileConfig
from luminal.store.settings import Settings
from tests.gateway.conftest import deploy_and_wait, tiny_graph, upload
from tests.scheduler.queue_fixtures import REDIS_URL
from tests.scheduler.test_compile_jobs import _status, stores  # noqa: F401 - a database with one compiling deployment

pytest.importorskip("celery")
VISIBILITY_TIMEOUT_S = 2.0


@pytest.fixture
def celery_settings(settings: Settings, redis_namespace: str) -> Settings:
    """The store fixtures' settings, with compiles sent to Celery on the test's own Redis key prefix."""
    return Settings(
        data_dir=settings.data_dir,
        database_url=settings.database_url,
        bootstrap_key=settings.bootstrap_key,
        max_upload_bytes=settings.max_upload_bytes,
        compile_runner="celery",
        queue_namespace=redis_namespace,
        compile_broker_url=REDIS_URL,
        compile_visibility_timeout_s=VISIBILITY_TIMEOUT_S,
    )


@pytest.fixture
def hold_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "hold"
    folder.mkdir()
    return folder


@pytest.fixture
def workers(celery_settings: Settings, hold_dir: Path, tmp_path: Path):
    """Starts `luminal compile-worker` processes (each in a session of its own, so one killpg ends the worker and
    its pool children as a machine's death would); every one still running is killed after the test."""
    settings, started = celery_settings, []

    def start(**extra_env: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "LUMINAL_DATA_DIR": str(settings.data_dir),
            "LUMINAL_DATABASE_URL": settings.resolved_database_url,
            "LUMINAL_COMPILE_BROKER_URL": REDIS_URL,
            "LUMINAL_QUEUE_NAMESPACE": celery_settings.queue_namespace,
            "LUMINAL_COMPILE_VISIBILITY_TIMEOUT_S": str(VISIBILITY_TIMEOUT_S),
            TEST_HOLD_ENV: str(hold_dir),
            **extra_env,
        }
        log = open(tmp_path / f"worker-{len(started)}.log", "wb")  # noqa: SIM115 - the process writes it
        command = [sys.executable, "-m", "luminal.cli", "compile-worker", "--concurrency", "1"]
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@pytest.fixture
def runner(celery_settings: Settings, stores):  # noqa: F811
    db, _, _ = stores
    compiles = CeleryCompileRunner(db, CeleryCompileConfig.from_settings(celery_settings))
    yield compiles
    compiles.shutdown()


def _wait_for(condition, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _started(hold_dir: Path) -> list[str]:
    return sorted(p.name for p in hold_dir.glob("started-*"))


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _kill_mid_compile(workers, runner, hold_dir: Path, deployment_id: int, **env: str) -> subprocess.Popen:
    """Worker A takes the job and is SIGKILLed (with its pool) while the job is held before compiling."""
    (hold_dir / "hold").touch()
    first = workers(**env)
    runner.submit(deployment_id)
    _wait_for(lambda: _started(hold_dir), "the first worker to start the compile")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    (hold_dir / "hold").unlink()
    return first


def _broker_is_empty(namespace: str) -> bool:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        prefix = f"{namespace}:celery:"
        return client.llen(prefix + QUEUE) == 0 and client.hlen(prefix + "unacked") == 0
    finally:
        client.close()


def test_a_deployment_compiled_by_a_celery_worker_becomes_ready_and_answers(workers, celery_settings, model_bytes):
    workers()
    app = create_app(celery_settings)
    with TestClient(app, headers={"Authorization": f"Bearer {celery_settings.bootstrap_key}"}) as c:
        assert upload(c, "tiny", model_bytes).status_code == 201
        deployment = deploy_and_wait(c, "tiny")
        assert (deployment["status"], deployment["error"]) == ("ready", None)
        x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
        body = {"inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP32", "data": x.ravel().tolist()}]}
        r = c.post("/v2/models/tiny/infer", json=body)
        assert r.status_code == 200, r.text
        expected = lm.run(tiny_graph(), {"x": x})["probs"]
        np.testing.assert_allclose(r.json()["outputs"][0]["data"], expected.reshape(-1), rtol=1e-5, atol=1e-6)


def test_a_worker_killed_mid_compile_has_its_job_redelivered_and_finished_once(
    workers,
    runner,
    stores,  # noqa: F811
    hold_dir,
    celery_settings,
):
    db, artifacts, deployment_id = stores
    before = _files(celery_settings.artifacts_dir)  # the uploaded graph
    first = _kill_mid_compile(workers, runner, hold_dir, deployment_id)
    assert _status(db, deployment_id) == ("compiling", None, None)  # the dead worker recorded nothing
    workers()  # a second worker restores the unacknowledged task once the visibility timeout has passed
    runner.drain(timeout=120)
    status, error, program_key = _status(db, deployment_id)
    assert (status, error) == ("ready", None) and artifacts.exists(program_key)
    deliveries = _started(hold_dir)
    assert len(deliveries) == 2 and not any(name.endswith(f"-{first.pid}") for name in deliveries[1:])
    assert len({name.rsplit("-", 1)[1] for name in deliveries}) == 2  # run by two different processes
    assert len(_files(celery_settings.artifacts_dir)) == len(before) + 1  # one program stored
    _wait_for(lambda: _broker_is_empty(celery_settings.queue_namespace), "the task to be acknowledged")
    assert _status(db, deployment_id) == (status, error, program_key)  # nothing ran it again


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_compile_process_killed_alone_is_requeued_to_its_worker(workers, runner, stores, hold_dir):  # noqa: F811
    """The OOM killer ends the pool child, not the worker: the task is rejected back to the queue at once."""
    db, artifacts, deployment_id = stores
    (hold_dir / "hold").touch()
    workers()
    runner.submit(deployment_id)
    _wait_for(lambda: _started(hold_dir), "the worker to start the compile")
    child_pid = int(_started(hold_dir)[0].rsplit("-", 1)[1])
    os.kill(child_pid, signal.SIGKILL)
    (hold_dir / "hold").unlink()
    runner.drain(timeout=120)
    status, error, program_key = _status(db, deployment_id)
    assert (status, error) == ("ready", None) and artifacts.exists(program_key)
    assert len(_started(hold_dir)) == 2  # run again, by a fresh pool child


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the kill test covers PostgreSQL
def test_a_failing_compile_is_recorded_failed_and_not_redelivered(workers, runner, stores, hold_dir, celery_settings):  # noqa: F811
    db, artifacts, deployment_id = stores
    with db.session() as s:  # the graph file is lost: the compiler cannot read it
        graph_key = _graph_key(s, deployment_id)
    artifacts.delete(graph_key)
    workers()
    runner.submit(deployment_id)
    runner.drain(timeout=120)
    status, error, program_key = _status(db, deployment_id)
    assert status == "failed" and error.startswith("FileNotFoundError: artifact") and program_key is None
    _wait_for(lambda: _broker_is_empty(celery_settings.queue_namespace), "the task to be acknowledged")
    assert len(_started(hold_dir)) == 1  # one delivery


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_compile_that_keeps_killing_its_worker_is_failed_after_its_last_attempt(
    workers,
    runner,
    stores,  # noqa: F811
    hold_dir,
    celery_settings,
):
    db, _, deployment_id = stores
    _kill_mid_compile(workers, runner, hold_dir, deployment_id)
    workers(LUMINAL_COMPILE_MAX_ATTEMPTS="1")  # the redelivery is the second attempt of one allowed
    runner.drain(timeout=120)
    status, error, program_key = _status(db, deployment_id)
    assert (
        status == "failed"
        and error.startswith("WorkerLost: the compile's worker died during 1 earlier")
        and not program_key
    )
    _wait_for(lambda: _broker_is_empty(celery_settings.queue_namespace), "the task to be acknowledged")


def _graph_key(session, deployment_id: int) -> str:
    from luminal.store import deployments as deployment_store

    return deployment_store.load_for_compile(session, deployment_id).model_version.artifact_key


def test_of_two_overlapping_runs_the_first_outcome_is_kept(stores):  # noqa: F811
    db, _, deployment_id = stores
    with db.session() as s:
        assert record_outcome(s, deployment_id, "first-program", None)
    with db.session() as s:  # a redelivered run that compiled too: its result is discarded
        assert not record_outcome(s, deployment_id, None, "RuntimeError: second run")
    assert _status(db, deployment_id) == ("ready", None, "first-program")


def test_compile_worker_refuses_to_start_without_a_redis_broker(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from luminal.cli.main import app

    for name in ("LUMINAL_QUEUE_URL", "LUMINAL_COMPILE_BROKER_URL"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, ["compile-worker", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1 and "needs a Redis broker" in result.output
    monkeypatch.setenv("LUMINAL_COMPILE_BROKER_URL", "amqp://guest@localhost//")
    result = CliRunner().invoke(app, ["compile-worker", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1 and "need a Redis broker" in result.output


def test_the_celery_runner_refuses_a_missing_broker():
    with pytest.raises(ValueError, match="LUMINAL_COMPILE_BROKER_URL or LUMINAL_QUEUE_URL"):
        CeleryCompileRunner(None, CeleryCompileConfig("", "lm", 60.0, 3))
