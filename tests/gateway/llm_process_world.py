"""A gateway on Redis whose language-model deployment (a tiny llama, one worker) runs its engine in a worker
process: what the tests of a gateway relaying a worker process share (one per module: it takes seconds to start)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import redis

from luminal.gateway.app import create_app
from luminal.llm_package import build_package, save_package
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, deploy_and_wait, upload
from tests.gateway.test_llm_routing_api import wait_for
from tests.gateway.threaded_server import ThreadedServer, free_port
from tests.llm_folders import hf_folder
from tests.scheduler.queue_fixtures import REDIS_URL

POSITIONS = 512  # long enough for sequences that run a while


class World:
    def __init__(self, server: ThreadedServer, app, settings: Settings, deployment: dict):
        self.server, self.app, self.settings, self.deployment = server, app, settings, deployment
        self.port = server.config.port
        self.redis = redis.Redis.from_url(REDIS_URL)

    @property
    def sequences(self):
        return self.app.state.platform.sequences

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120,
                            headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"})  # fmt: skip

    def streams(self) -> set[bytes]:
        """The event streams of the sequences workers took so far (one each, named by request id)."""
        return set(self.redis.scan_iter(match=f"{self.settings.queue_namespace}:seq:events:*", count=500))

    def queued(self) -> bool:
        d = self.deployment["id"]
        return self.sequences.depth(d) + self.sequences.in_flight(d) > 0


@contextmanager
def serving(tmp, namespace: str) -> Iterator[World]:
    """The gateway on Redis, its one-worker deployment of a tiny llama ready in a worker process."""
    settings = Settings(data_dir=tmp / "data", database_url=f"sqlite:///{tmp / 'meta.db'}", bootstrap_key=BOOTSTRAP_KEY,
                        compile_runner=COMPILE_RUNNER, queue_url=REDIS_URL, queue_namespace=namespace,
                        worker_backend="process")  # fmt: skip
    app = create_app(settings)
    server = ThreadedServer(app, free_port())
    server.start()
    try:
        folder = tmp / "llama"
        hf_folder(folder, "llama")
        save_package(build_package(folder, max_batch=4, positions=POSITIONS), folder / "model.lpkg")
        with httpx.Client(base_url=f"http://127.0.0.1:{server.config.port}", timeout=60,
                          headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}) as http:  # fmt: skip
            assert upload(http, "tiny-llama", (folder / "model.lpkg").read_bytes()).status_code == 201
            deployment = deploy_and_wait(http, "tiny-llama", gpu_type="cpu", min_replicas=1, max_replicas=1)
            wait_for(lambda: any(w["ready_at"] for w in http.get(f"/v1/deployments/{deployment['id']}/workers")
                                   .json()["workers"]), "the worker process is ready", 120)  # fmt: skip
        world = World(server, app, settings, deployment)
        yield world
        world.redis.close()
    finally:
        server.stop()
