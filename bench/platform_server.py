"""A whole platform served from this process for the HTTP benchmarks: the gateway (uvicorn on a thread of its
own) with a model uploaded and deployed, ready to be called through its URL. What bench/llm_http.py,
bench/llm_workers.py and bench/structured_decode.py share."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test helpers make the server

import httpx  # noqa: E402

from luminal.gateway.app import create_app  # noqa: E402
from luminal.store.settings import Settings  # noqa: E402
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, upload  # noqa: E402
from tests.gateway.threaded_server import ThreadedServer, free_port  # noqa: E402


def platform_settings(root: Path, **extra) -> Settings:
    """A platform whose data and SQLite metadata live under `root`, compiling on threads (`extra`: other fields,
    such as a Redis queue URL and worker processes)."""
    return Settings(data_dir=root / "data", database_url=f"sqlite:///{root / 'meta.db'}",
                    bootstrap_key=BOOTSTRAP_KEY, compile_runner="thread", **extra)  # fmt: skip


@contextmanager
def served(settings: Settings, package: Path, name: str, timeout: float = 600, **deployment) -> Iterator[dict]:
    """The platform serving `package` as `name`, deployed on the CPU with `deployment`'s fields (replicas, ...):
    yields {"url": the gateway's base URL, "deployment": its deployment as the API shows it}; stopped after."""
    port = free_port()
    server = ThreadedServer(create_app(settings), port)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}, timeout=300) as http:
            assert upload(http, name, package.read_bytes()).status_code == 201
            ready = deploy_and_wait(http, name, timeout=timeout, gpu_type="cpu", **deployment)
            assert ready["status"] == "ready", ready
        yield {"url": url, "deployment": ready}
    finally:
        server.stop()
