"""Gateway fixtures: the metadata store on SQLite and on PostgreSQL (every store-backed test runs on both), a
real uvicorn server on a free port, and a tiny model file.

PostgreSQL gets a fresh database per test run (dropped at the end) and a fresh schema per test; when the
server at LUMINAL_TEST_POSTGRES_URL (default 127.0.0.1:5432, database `test`) is unreachable those cases skip
with that reason (under CI they fail: tests/prerequisites.py).

A test that takes `database_url` alone (the migrations' own tests) gets an empty database. One that takes `db` or
`settings` (the store, the server) gets the newest schema with no rows, as it would after migrating an empty one,
but without migrating it: migrating from nothing cost each of the 500 of them about 0.1 s on SQLite and 0.3 s on
PostgreSQL. SQLite's is a copy of a file migrated once per worker; PostgreSQL's is the schema the test before left,
rows deleted and sequences restarted, when that is still the newest revision with the same tables, else the schema
dropped and migrated again."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from sqlalchemy import create_engine, text

import luminal as lm
from luminal.gateway.app import create_app
from luminal.graph_file import graph_to_bytes
from luminal.store.database import Database, migrate
from luminal.store.settings import Settings
from luminal.store.tables import Base
from tests import prerequisites
from tests.gateway.network_guard import no_network  # noqa: F401 - a fixture for the webhook tests
from tests.gateway.threaded_server import ThreadedServer, free_port
from tests.tls_context import tls_context

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
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


_MIGRATED_SQLITE: list[Path] = []  # this worker's SQLite file at the newest schema, made on first use


def _migrated_sqlite(tmp_path_factory) -> Path:
    """A SQLite file at the newest schema with no rows, migrated once per worker, to copy. (A plain function, not
    a fixture: the conftests that import `database_url` by name would each have to import it too.)"""
    if not _MIGRATED_SQLITE:
        path = tmp_path_factory.mktemp("migrated") / "meta.db"
        database = Database(f"sqlite:///{path}")
        migrate(database.engine)
        database.dispose()  # the last connection's close checkpoints the WAL into the file
        _MIGRATED_SQLITE.append(path)
    return _MIGRATED_SQLITE[0]


_POSTGRES_HEAD: dict[str, tuple] = {}  # url -> (revision, tables) of its schema freshly migrated


def _postgres_at_head_without_rows(url: str) -> None:
    """The newest schema with no rows in `url`'s database: the schema left there emptied, when it is still the
    freshly migrated one's revision with the same tables (nothing the tests do alters columns without a
    revision), else dropped and migrated again."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            found = _postgres_schema(conn)
            if found == _POSTGRES_HEAD.get(url):
                _delete_rows(conn, found[1])
                return
        _fresh_postgres_schema(url)
        migrate(engine)
        with engine.connect() as conn:
            _POSTGRES_HEAD[url] = _postgres_schema(conn)
    finally:
        engine.dispose()


def _delete_rows(conn, tables: frozenset[str]) -> None:
    """Every row but the revision's, children before parents (the declared foreign keys' order, reversed; TRUNCATE
    would take 0.2 s), and every sequence restarted, so ids count from 1 as in a new schema."""
    declared = [t.name for t in reversed(Base.metadata.sorted_tables) if t.name in tables]
    for table in [*declared, *sorted(tables - set(declared) - {"alembic_version"})]:
        conn.execute(text(f'DELETE FROM "{table}"'))
    for (sequence,) in conn.execute(text("SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'")):
        conn.execute(text(f'ALTER SEQUENCE "{sequence}" RESTART'))


def _postgres_schema(conn) -> tuple:
    """(alembic revision or None, table names) of the public schema."""
    tables = frozenset(conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars())
    revision = (
        conn.execute(text("SELECT version_num FROM alembic_version")).scalar() if "alembic_version" in tables else None
    )
    return revision, tables


MIGRATED_USERS = {"db", "settings"}  # the fixtures that want the newest schema (module docstring)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path: Path) -> str:
    migrated = not MIGRATED_USERS.isdisjoint(request.fixturenames)
    if request.param == "sqlite":
        path = tmp_path / "meta.db"
        if migrated:
            shutil.copyfile(_migrated_sqlite(request.getfixturevalue("tmp_path_factory")), path)
        return f"sqlite:///{path}"
    url = request.getfixturevalue("postgres_database")
    if migrated:
        _postgres_at_head_without_rows(url)
    else:
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
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, verify=tls_context())


@contextmanager
def serving(settings: Settings) -> Iterator[RunningServer]:
    """The gateway under uvicorn in a thread, on a free port; stopped (and its compile jobs drained) after."""
    app = create_app(settings)
    port = free_port()
    uv = ThreadedServer(app, port)
    uv.start()
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", f"127.0.0.1:{port}", app)
    finally:
        uv.stop()


@pytest.fixture
def server(settings: Settings):
    with serving(settings) as running:
        yield running


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
