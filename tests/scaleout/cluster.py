"""The platform as separate processes on one machine, as it runs on several: `luminal serve` gateways (each with a
data directory of its own, as on a host of its own), `luminal compile-worker` Celery workers, and the worker
processes the provisioner of the lease-holding gateway starts, all on one PostgreSQL database, one Redis and one
S3 server. Used by tests/scaleout and bench/scaleout.py.

Every process starts in a session of its own, so a worker process a gateway started stays in that gateway's
process group after the gateway is SIGKILLed, and `close()` ends it with the group (as a host's death would).
Readiness is polled with generous deadlines, never assumed after a sleep: the machine may be loaded.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.tls_context import tls_context

START_TIMEOUT_S = 120.0  # a gateway migrates the schema under the startup lock; on a loaded machine it is slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], object], what: str, timeout: float = START_TIMEOUT_S, every: float = 0.05):
    """Polls `condition` until it returns something true (returned), failing with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


@dataclass
class Shared:
    """What every process of one platform shares: its database, Redis (queues, registry, compile broker, under one
    key prefix), artifact store and first key; `extra` are further LUMINAL_* or AWS_* variables for all."""

    database_url: str
    queue_url: str
    namespace: str
    artifact_url: str
    bootstrap_key: str
    extra: dict[str, str] = field(default_factory=dict)

    def env(self, data_dir: Path, **more: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LUMINAL_")}
        env.update(
            LUMINAL_DATA_DIR=str(data_dir),
            LUMINAL_DATABASE_URL=self.database_url,
            LUMINAL_QUEUE_URL=self.queue_url,
            LUMINAL_QUEUE_NAMESPACE=self.namespace,
            LUMINAL_ARTIFACT_URL=self.artifact_url,
            LUMINAL_BOOTSTRAP_KEY=self.bootstrap_key,
            LUMINAL_COMPILE_RUNNER="celery",
            LUMINAL_WORKER_BACKEND="process",
        )
        env.update(self.extra)
        env.update(more)
        return env


class Process:
    """A child in a session of its own, its output in `log`."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path):
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self.pid = self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL this process alone (what it started lives on, as after a crash)."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)

    def kill_group(self) -> None:
        """SIGKILL the process and everything it started (its Celery pool, its worker processes)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=60)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


class Gateway(Process):
    """`luminal serve` on a free port, with a data directory of its own and the replica id `name`."""

    def __init__(self, shared: Shared, root: Path, name: str, **env: str):
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        data_dir = root / name
        data_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "luminal.cli", "serve", "--port", str(self.port)]
        super().__init__(command, shared.env(data_dir, LUMINAL_GATEWAY_ID=name, **env), root / f"{name}.log")
        self.key = shared.bootstrap_key

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> Gateway:
        def ready() -> bool:
            if not self.alive():
                raise RuntimeError(f"gateway {self.name} exited with {self.process.returncode}:\n{self.tail()}")
            try:
                return httpx.get(f"{self.url}/v2/health/ready", timeout=5, verify=tls_context()).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, f"gateway {self.name} to serve", timeout, every=0.1)
        return self

    def client(self, timeout: float = 60) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=timeout)


class CompileWorker(Process):
    """`luminal compile-worker --concurrency 1`: one compile at a time, in a pool child of its own."""

    def __init__(self, shared: Shared, root: Path, name: str, **env: str):
        data_dir = root / name
        data_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "luminal.cli", "compile-worker", "--concurrency", "1"]
        super().__init__(command, shared.env(data_dir, **env), root / f"{name}.log")


def start_platform(
    shared: Shared, root: Path, processes: list[Process], gateways: int = 2, **compile_env: str
) -> list[Gateway]:
    """A compile worker, then `gateways` gateways one after another (the first takes the provisioner lease),
    each appended to `processes` as it starts, so the caller ends them even when a later one fails to start."""
    processes.append(CompileWorker(shared, root, "compile-1", **compile_env))
    started = []
    for name in ("gw-a", "gw-b", "gw-c", "gw-d")[:gateways]:
        gateway = Gateway(shared, root, name)
        processes.append(gateway)
        started.append(gateway.wait_ready())
    return started


def deploy(gateway: Gateway, name: str, graph: bytes, replicas: int, timeout: float = START_TIMEOUT_S) -> dict:
    """Uploads `graph` as model `name` and deploys it with `replicas` worker processes; returns the deployment
    once it is ready and that many of its workers are."""
    with gateway.client() as http:
        uploaded = http.post("/v1/models", params={"name": name}, content=graph)
        assert uploaded.status_code == 201, uploaded.text
        spec = dict(model=name, min_replicas=replicas, max_replicas=replicas, max_batch_size=16, max_queue_delay_ms=5)
        created = http.post("/v1/deployments", json=spec)
        assert created.status_code == 202, created.text
        deployment_id = created.json()["id"]
        compiled = wait_for(
            lambda: (d := http.get(f"/v1/deployments/{deployment_id}").json())["status"] != "compiling" and d,
            f"deployment {deployment_id} to compile", timeout,
        )  # fmt: skip
        assert compiled["status"] == "ready", compiled
        wait_for(lambda: len(ready_workers(http, deployment_id)) == replicas, f"{replicas} ready workers", timeout)
    return compiled


def running(pid: int) -> bool:
    """Whether process `pid` runs; a zombie nobody has reaped yet (an orphan's parent may not reap) does not."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.parent.parent.is_dir():  # no procfs: whether the pid exists at all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def ready_workers(client: httpx.Client, deployment_id: int) -> list[dict]:
    """The deployment's worker processes that registered ready (with their pids), as a gateway reports them."""
    workers = client.get(f"/v1/deployments/{deployment_id}/workers").json()["workers"]
    return [w for w in workers if w["ready_at"] is not None]


def close_all(processes: list[Process]) -> None:
    """Ends every process and what it started (worker processes orphaned by a killed gateway included)."""
    for p in processes:
        if p.alive():
            p.process.send_signal(signal.SIGTERM)  # a gateway stops its workers and releases its lease
    deadline = time.monotonic() + 30
    for p in processes:
        try:
            p.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        p.kill_group()
