"""Gateway fixtures: the metadata store on SQLite and on PostgreSQL (every store-backed test runs on both), a
real uvicorn server on a free port, and a tiny model file.

PostgreSQL gets a fresh database per test run (dropped at the end) and a fresh schema per test; when the
server at LUMINAL_TEST_POSTGRES_URL (default 127.0.0.1:5432, database `test`) is unreachable those cases skip
with that reason (under CI they fail: tests/prerequisites.py)."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

import luminal as lm
from luminal.gateway.app import create_app
from luminal.graph_file import graph_to_bytes
from luminal.store.database import Database, migrate
from luminal.store.settings import Settings
from tests import prerequisites
from tests.gateway.network_guard import no_network  # noqa: F401 - a fixture for the webhook tests
from tests.gateway.threaded_server import ThreadedServer, free_port

ADMIN_URL = os.environ.get("LUMINAL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
BOOTSTRAP_KEY = "lm_test-bootstrap-key-0123456789abcdef"


def tiny_graph(features: int = 4, classes: int = 3) -> lm.Graph:
    """softmax(x @ w + b) over a symbolic batch: small enough to compile in about a second."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", 1, 64), features))
    w, b = g.weight("w", (features, classes)), g.weight("b", (classes,))
    (x @ w + b).softmax(-1).output("probs")
    rng = np.random.default_rng(0)
    g.bind({"w": rng.standard_normal((features, classes)).astype(np.float32), "b": np.ones(classes, np.float32)})
    return g


@pytest.fixture(scope="session")
def model_bytes() -> bytes:
    return graph_to_bytes(tiny_graph())


@pytest.fixture(scope="session")
def postgres_database():
    """A database created for this test run on the local PostgreSQL, dropped at the end."""
    try:
        import psycopg

        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except Exception as e:  # any failure to reach the server means these cases cannot run here
        prerequisites.unavailable("PostgreSQL", f"PostgreSQL is unreachable at {ADMIN_URL}: {e}")
    name = f"luminal_test_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    base = ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _fresh_postgres_schema(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'meta.db'}"
    url = request.getfixturevalue("postgres_database")
    _fresh_postgres_schema(url)
    return url


@pytest.fixture
def db(database_url: str):
    """The metadata store, migrated, on each database: for tests of the store layer without a server."""
    database = Database(database_url)
    migrate(database.engine)
    yield database
    database.dispose()


# Compile jobs run in the gateway's own threads here: the default pool of spawned processes costs each test's
# platform about 1.3 s to start its child and 0.4 s to stop it, and these tests are about the API, not where a
# compile runs. The process pool is tested on its own (tests/scheduler/test_compile_jobs.py) and by every test that
# runs `luminal serve` as a process (tests/cli/), which keeps the default.
COMPILE_RUNNER = "thread"


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        bootstrap_key=BOOTSTRAP_KEY,
        max_upload_bytes=2**20,
        compile_runner=COMPILE_RUNNER,
    )


@dataclass
class RunningServer:
    url: str
    host_port: str  # what tritonclient takes
    app: object

    @property
    def platform(self):
        return self.app.state.platform

    def client(self, key: str | None = BOOTSTRAP_KEY) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture
def server(settings: Settings):
    """The gateway under uvicorn in a thread, on a free port; stopped (and its compile jobs drained) after."""
    app = create_app(settings)
    port = free_port()
    uv = ThreadedServer(app, port)
    uv.start()
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", f"127.0.0.1:{port}", app)
    finally:
        uv.stop()


def upload(client: httpx.Client, name: str, data: bytes) -> httpx.Response:
    return client.post("/v1/models", params={"name": name}, content=data)


def deploy_and_wait(client: httpx.Client, name: str, timeout: float = 120, **settings) -> dict:
    created = client.post("/v1/deployments", json={"model": name, **settings})
    assert created.status_code == 202, created.text
    deployment = created.json()
    deadline, pause = time.monotonic() + timeout, 0.01
    while deployment["status"] == "compiling":
        assert time.monotonic() < deadline, "the compile did not finish"
        time.sleep(pause)  # a cached compile is ready within tens of milliseconds; a cold one takes seconds
        pause = min(pause * 2, 0.1)
        deployment = client.get(f"/v1/deployments/{deployment['id']}").json()
    return deployment


@pytest.fixture
def deployed(server, model_bytes):
    """The server with the tiny model uploaded as "tiny" and deployed."""
    c = server.client()
    assert upload(c, "tiny", model_bytes).status_code == 201
    assert deploy_and_wait(c, "tiny")["status"] == "ready"
    return server
