"""Compile jobs record every outcome on the deployment, survive a restart, and leave no program behind for a
deployment deleted while it compiled."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import luminal.scheduler.compile_jobs as compile_jobs
from luminal.gateway.app import start_platform, stop_platform
from luminal.gateway.uploads import inspect_graph
from luminal.store import deployments as deployment_store
from luminal.store import models as model_store
from luminal.store.artifacts import LocalArtifactStore
from luminal.store.database import Database, migrate
from luminal.store.models import UploadedGraph
from luminal.store.tenants import create_tenant


@pytest.fixture
def stores(settings, model_bytes: bytes):
    """A migrated database and artifact store holding one tenant's model `tiny` version 1, deployed (compiling)."""
    db = Database(settings.resolved_database_url)
    migrate(db.engine)
    artifacts = LocalArtifactStore(settings.artifacts_dir)
    spooled = settings.data_dir / "tiny.lgraph"
    spooled.write_bytes(model_bytes)
    signature, symbols = inspect_graph(spooled)
    sha = hashlib.sha256(model_bytes).hexdigest()
    key = artifacts.put_file(spooled, sha)
    spec = deployment_store.DeploymentSpec("tiny", None, "cpu", "cpu", 8, 5, 0, 1)
    with db.session() as s:
        tenant, _ = create_tenant(s, "acme")
        model_store.add_version(s, tenant, "tiny", UploadedGraph(sha, len(model_bytes), key, signature, symbols))
        deployment_id = deployment_store.create_deployment(s, tenant, spec).id
    yield db, artifacts, deployment_id
    db.dispose()


def _status(db: Database, deployment_id: int):
    with db.session() as s:
        row = deployment_store.load_for_compile(s, deployment_id)
        return None if row is None else (row.status, row.error, row.program_key)


def test_a_compile_cut_off_by_a_restart_is_resubmitted(settings, stores):
    db, _, deployment_id = stores
    assert _status(db, deployment_id)[0] == "compiling"  # as a crash mid-compile leaves it
    platform = start_platform(settings)
    try:
        platform.compiles.drain(timeout=120)
        status, error, program_key = _status(db, deployment_id)
        assert (status, error) == ("ready", None) and platform.artifacts.exists(program_key)
    finally:
        stop_platform(platform)


def test_a_deployment_deleted_while_compiling_leaves_no_program(settings, stores, monkeypatch):
    db, artifacts, deployment_id = stores
    real_compile = compile_jobs.lm.compile

    def compile_then_lose_the_deployment(graph, target):
        with db.session() as s:  # the owner deletes the deployment while the compiler works
            s.delete(s.get(deployment_store.Deployment, deployment_id))
        return real_compile(graph, target=target)

    monkeypatch.setattr(compile_jobs.lm, "compile", compile_then_lose_the_deployment)
    published = []
    real_put = artifacts.put_file
    monkeypatch.setattr(artifacts, "put_file", lambda path, sha: published.append(real_put(path, sha)) or sha)
    before = sorted(p.name for p in Path(settings.artifacts_dir).rglob("*") if p.is_file())
    compile_jobs.compile_deployment(db, artifacts, deployment_id, settings.spool_dir)
    assert _status(db, deployment_id) is None
    assert len(published) == 1 and not artifacts.exists(published[0])  # the program was stored, then removed
    assert sorted(p.name for p in Path(settings.artifacts_dir).rglob("*") if p.is_file()) == before
    assert not any(settings.spool_dir.rglob("*.lprog"))


def test_a_missing_graph_file_fails_the_deployment(settings, stores):
    db, artifacts, deployment_id = stores
    with db.session() as s:
        graph_key = deployment_store.load_for_compile(s, deployment_id).model_version.artifact_key
    artifacts.delete(graph_key)
    compile_jobs.compile_deployment(db, artifacts, deployment_id, settings.spool_dir)
    status, error, program_key = _status(db, deployment_id)
    assert status == "failed" and error.startswith("FileNotFoundError: artifact") and program_key is None


def _die(*_args) -> None:
    """Stands in for the compile job in the pool's child: the process dies as the OOM killer would end it."""
    import os

    os._exit(137)


def test_a_compile_process_that_dies_fails_its_deployment_and_the_next_job_runs(settings, stores, monkeypatch):
    db, _, deployment_id = stores
    runner = compile_jobs.ProcessCompileRunner(
        db, settings.resolved_database_url, settings.artifact_location, settings.spool_dir
    )
    try:
        monkeypatch.setattr(compile_jobs, "_compile_in_child", _die)  # pickled by name: the child imports _die
        runner.submit(deployment_id)
        runner.drain(timeout=120)
        status, error, _ = _status(db, deployment_id)
        assert status == "failed" and "compile process died" in error
        with db.session() as s:  # the owner retries: the same deployment compiling again, in a fresh pool
            row = s.get(deployment_store.Deployment, deployment_id)
            row.status, row.error = "compiling", None
        monkeypatch.undo()
        runner.submit(deployment_id)
        runner.drain(timeout=120)
        assert _status(db, deployment_id)[0] == "ready"
    finally:
        runner.shutdown()
