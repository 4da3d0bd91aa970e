"""A gateway whose language-model workers run on a remote backend (Kubernetes or EC2) that a node stand-in turns into
local processes: PostgreSQL and Redis shared as other machines would share them, artifacts on an S3 server (moto's:
a worker cannot read the gateway's disk), and a tiny llama deployed with no replica until traffic comes. What the
tests of either backend share; one per module (the compile and the S3 server take seconds)."""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx

from luminal.llm_package import build_package, save_package
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, deploy_and_wait, upload
from tests.gateway.test_llm_worker_processes import greedy_ids
from tests.gateway.threaded_server import ThreadedServer, free_port
from tests.llm_folders import hf_folder, hf_tokenizer
from tests.scheduler.queue_fixtures import REDIS_URL

REGION, BUCKET = "us-east-1", "luminal-artifacts"
MAX_BATCH, POSITIONS = 4, 320
MODEL = "tiny-llama"
VENV = Path(sys.executable).parent.parent  # what the worker image (or the VM's pip) installed: this checkout
# transformers' greedy answers, by (the model's weights, prompt): each world's llama is hf_folder's seeded one, and a
# greedy answer of n tokens is the first n of a longer one, so the kill test's long answers are generated once for
# both backends and its short follow-ups not at all (generate() costs more CPU here than the workers' decoding).
_GREEDY: dict[tuple[bytes, str], list[int]] = {}


@dataclass
class Aws:
    endpoint: str

    def env(self) -> dict[str, str]:
        """The AWS settings of the gateway and of every worker (an instance role's, on a real machine)."""
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION,
                "AWS_ENDPOINT_URL": self.endpoint}  # fmt: skip

    def client(self, service: str) -> Any:
        keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}  # as env() names them
        return boto3.client(service, region_name=REGION, endpoint_url=self.endpoint, **keys)


@contextmanager
def moto_server() -> Iterator[Aws]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    # Its request lines (several a second from the node's and the provisioner's polls) would bury the provisioner's
    # warnings in a failed test's captured log.
    request_log = logging.getLogger("werkzeug")
    level = request_log.level
    request_log.setLevel(logging.WARNING)
    try:
        host, port = server.get_host_and_port()
        aws = Aws(f"http://{host}:{port}")
        aws.client("s3").create_bucket(Bucket=BUCKET)
        yield aws
    finally:
        request_log.setLevel(level)
        server.stop()


def worker_environment(settings: Settings, aws: Aws) -> dict[str, str]:
    """What the operator puts in the workers' Secret: how to reach the shared services."""
    return {"LUMINAL_DATABASE_URL": settings.resolved_database_url, "LUMINAL_QUEUE_URL": settings.queue_url,
            "LUMINAL_ARTIFACT_URL": settings.artifact_url, **aws.env()}  # fmt: skip


def image_environment() -> dict[str, str]:
    """The worker image's own environment: its Python first on PATH (as deploy/docker's images have it)."""
    return {"PATH": f"{VENV}/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}


def platform_settings(tmp: Path, database_url: str, namespace: str, **backend: Any) -> Settings:
    return Settings(data_dir=tmp / "gateway", database_url=database_url, bootstrap_key=BOOTSTRAP_KEY,
                    compile_runner=COMPILE_RUNNER, queue_url=REDIS_URL, queue_namespace=namespace,
                    artifact_url=f"s3://{BUCKET}/{namespace}", scale_target_per_replica=2, scale_up_cooldown_s=0,
                    scale_down_cooldown_s=10, scale_to_zero_after_s=10, execution_timeout_s=30, **backend)  # fmt: skip


class World:
    def __init__(self, server: ThreadedServer, app: Any, settings: Settings, deployment: dict, folder: Path, hf):
        self.server, self.app, self.settings, self.deployment = server, app, settings, deployment
        self.url = f"http://127.0.0.1:{server.config.port}"
        self.model, self.tokenizer = hf, hf_tokenizer(folder)

    @property
    def platform(self):
        return self.app.state.platform

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"})

    def expected(self, jobs: list[tuple[str, int]]) -> list[str]:
        """transformers' greedy generate() of each (prompt, max_tokens), as the completions endpoint's text."""
        weights = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in self.model.parameters())).digest()
        longest: dict[str, int] = {}
        for prompt, n in jobs:
            longest[prompt] = max(n, longest.get(prompt, 0))
        for prompt, n in longest.items():
            if len(_GREEDY.get((weights, prompt), ())) < n:
                _GREEDY[weights, prompt] = greedy_ids(self.model, self.tokenizer, prompt, n)
        return [self.tokenizer.decode(_GREEDY[weights, p][:n], skip_special_tokens=True) for p, n in jobs]

    def workers(self) -> list[dict]:
        with self.http() as http:
            return http.get(f"/v1/deployments/{self.deployment['id']}/workers").json()["workers"]


@contextmanager
def serving(tmp: Path, settings: Settings) -> Iterator[World]:
    """The gateway, with the tiny llama uploaded and deployed (min_replicas 0, max_replicas 2)."""
    from luminal.gateway.app import create_app

    app = create_app(settings)
    server = ThreadedServer(app, free_port())
    server.start()
    try:
        folder = tmp / "llama"
        hf = hf_folder(folder, "llama")
        save_package(build_package(folder, max_batch=MAX_BATCH, positions=POSITIONS), folder / "model.lpkg")
        with httpx.Client(base_url=f"http://127.0.0.1:{server.config.port}", timeout=120,
                          headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}) as http:  # fmt: skip
            assert upload(http, MODEL, (folder / "model.lpkg").read_bytes()).status_code == 201
            deployment = deploy_and_wait(http, MODEL, gpu_type="cpu", min_replicas=0, max_replicas=2)
            assert deployment["status"] == "ready", deployment
        yield World(server, app, settings, deployment, folder, hf)
    finally:
        server.stop()
