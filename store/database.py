"""Engine, sessions and schema migrations for the metadata database (SQLite file or PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # Compile jobs write from their own threads; SQLite's default would refuse a connection made elsewhere.
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    # SQLite ignores foreign keys (and so ON DELETE CASCADE) unless asked, per connection.
    cursor.execute("PRAGMA foreign_keys=ON")
    # WAL lets readers proceed while a compile job commits its result.
    cursor.execute("PRAGMA journal_mode=WAL")
    # In WAL mode NORMAL still survives an application crash (only a power loss can drop the last commits) and
    # saves an fsync per commit: a usage record per executed batch is a commit on the serving path.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolates '%'
    return cfg


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (what `alembic upgrade head` does), on `engine`'s database."""
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")


class Database:
    """The engine and a session factory; `session()` commits on success and rolls back on any error, so a
    failed request leaves nothing half-written."""

    def __init__(self, url: str):
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
