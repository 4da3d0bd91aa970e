"""A gateway for embedding tests (SQLite, compiles in a thread) and `luminal deploy FOLDER` against it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from typer.testing import CliRunner

from luminal.cli.main import app
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, RunningServer, serving


def deploy_folder(url: str, folder: Path, name: str, *options: str):
    """`luminal deploy FOLDER --name NAME OPTIONS...` against the gateway at `url`: the CLI's result."""
    env = {"LUMINAL_URL": url, "LUMINAL_API_KEY": BOOTSTRAP_KEY}
    # A long delay lets concurrent inputs gather into one padded batch.
    args = ["deploy", str(folder), "--name", name, "--max-batch-size", "8", "--max-delay-ms", "50", *options]
    return CliRunner().invoke(app, args, env=env)


@contextmanager
def running_gateway(tmp: Path) -> Iterator[RunningServer]:
    settings = Settings(data_dir=tmp / "data", database_url=f"sqlite:///{tmp / 'meta.db'}",
                        bootstrap_key=BOOTSTRAP_KEY, compile_runner="thread")  # fmt: skip
    with serving(settings) as gateway:
        yield gateway
