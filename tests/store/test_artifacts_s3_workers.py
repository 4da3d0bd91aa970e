"""Worker processes on S3 artifacts: a worker the provisioner starts learns the artifact URL from the gateway,
fetches its program from the bucket into its cache (none was there), and serves."""

from __future__ import annotations

import shutil
import uuid

import numpy as np
import pytest

import luminal as lm
from luminal.store.settings import Settings
from luminal.store.tables import Deployment
from tests import prerequisites
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, server, tiny_graph, upload  # noqa: F401
from tests.provisioner.test_local_processes import workers
from tests.scheduler.queue_fixtures import REDIS_URL


@pytest.fixture(name="settings")
def process_settings(tmp_path, s3_env) -> Settings:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as e:  # worker processes take requests through Redis Streams
        prerequisites.unavailable("Redis", f"Redis is unreachable at {REDIS_URL}: {e}")
    namespace = f"lmtest{uuid.uuid4().hex[:10]}"
    yield Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{tmp_path / 'meta.db'}",
                   bootstrap_key=BOOTSTRAP_KEY, queue_url=REDIS_URL, queue_namespace=namespace,
                   worker_backend="process", compile_runner="thread", artifact_url=s3_env)  # fmt: skip
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{namespace}*"))
    if keys:
        client.delete(*keys)


def test_a_worker_process_fetches_its_program_from_the_bucket(server, settings, model_bytes):  # noqa: F811
    http = server.client()
    upload(http, "tiny", model_bytes)
    deployment = deploy_and_wait(http, "tiny", min_replicas=0, max_replicas=1)
    cache = settings.artifact_location.cache_dir
    shutil.rmtree(cache)  # what the compile left there: the worker must read the bucket
    r = http.patch(f"/v1/deployments/{deployment['id']}", json={"min_replicas": 1})
    assert r.status_code == 200, r.text
    workers(http, deployment["id"], 1, timeout=120)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    body = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
    r = http.post("/v2/models/tiny/infer", json=body)
    assert r.status_code == 200, r.text
    want = lm.run(tiny_graph(), {"x": x})["probs"]
    np.testing.assert_allclose(np.array(r.json()["outputs"][0]["data"]).reshape(2, 3), want, rtol=1e-5)
    with server.platform.db.session() as session:
        program_key = session.get(Deployment, deployment["id"]).program_key
    assert [p.name for p in cache.rglob("*") if p.is_file()] == [program_key]
