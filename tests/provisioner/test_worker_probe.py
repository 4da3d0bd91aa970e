"""A worker pod's probes read the worker registry: ready once the worker marked itself ready, live while its
heartbeat is fresh. Run as the pod runs them (a process, its id in POD_NAME) against a real Redis registry."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from luminal.provisioner.worker_probe import verdict
from luminal.scheduler.registry import WorkerInfo, open_registry
from tests import prerequisites
from tests.scheduler.queue_fixtures import REDIS_URL

INFO = WorkerInfo("luminal-worker-d3-abc", 3, pid=1, host="pod", device="h100", last_heartbeat=1000.0)


def test_verdicts():
    assert verdict("ready", None, 1000, 330) == "this worker is not registered (yet)"
    assert verdict("ready", INFO, 1000, 330) == "the program is still loading"
    ready = WorkerInfo(**{**INFO.__dict__, "ready_at": 990.0})
    assert verdict("ready", ready, 1000, 330) is None
    assert verdict("live", INFO, 1330, 330) is None
    assert verdict("live", INFO, 1331, 330) == "no heartbeat for 331 s"


def probe(check: str, namespace: str, pod: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "POD_NAME": pod, "LUMINAL_QUEUE_URL": REDIS_URL, "LUMINAL_QUEUE_NAMESPACE": namespace}
    command = [sys.executable, "-m", "luminal.provisioner.worker_probe", check]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_the_probe_command_against_redis():
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as e:
        prerequisites.unavailable("Redis", f"Redis is unreachable at {REDIS_URL}: {e}")
    namespace = f"lmtest{uuid.uuid4().hex[:10]}"
    registry = open_registry(REDIS_URL, namespace)
    try:
        assert probe("ready", namespace, INFO.worker_id).returncode == 1
        registry.register(INFO)
        not_ready = probe("ready", namespace, INFO.worker_id)
        assert not_ready.returncode == 1 and "still loading" in not_ready.stderr
        assert probe("live", namespace, INFO.worker_id).returncode == 0  # registered now: a fresh heartbeat
        registry.mark_ready(INFO.worker_id)
        assert probe("ready", namespace, INFO.worker_id).returncode == 0
        assert probe("ready", namespace, "another-pod").returncode == 1
        assert probe("sideways", namespace, INFO.worker_id).returncode == 2
    finally:
        registry.close()
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(f"{namespace}*"))
        if keys:
            client.delete(*keys)
