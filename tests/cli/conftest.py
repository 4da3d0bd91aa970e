"""The CLI tests talk to the same real server the gateway tests use (SQLite and PostgreSQL). Every test gets its
own config file path and no LUMINAL_URL / LUMINAL_API_KEY from the caller's shell, so a developer's real login
can neither leak in nor be overwritten."""

from pathlib import Path

import pytest

from luminal.cli import common
from tests.gateway.conftest import database_url, model_bytes, postgres_database, server, settings  # noqa: F401


@pytest.fixture(autouse=True)
def isolated_cli(tmp_path: Path, monkeypatch) -> Path:
    config = tmp_path / "cli-config" / "config.toml"
    monkeypatch.setenv("LUMINAL_CONFIG", str(config))
    monkeypatch.delenv("LUMINAL_URL", raising=False)
    monkeypatch.delenv("LUMINAL_API_KEY", raising=False)
    monkeypatch.setattr(common.out, "width", 200)  # tables unwrapped, whatever terminal runs the tests
    return config
