"""The platform with LUMINAL_ARTIFACT_URL=s3://...: a model uploaded through the gateway is stored in the bucket,
compiled by a compile process that fetches it from there, and answers inferences; a hostile file is refused as
with the local store, and nothing of it reaches the bucket."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import luminal as lm
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, server, tiny_graph, upload  # noqa: F401
from tests.store.s3_server import BUCKET


@pytest.fixture(name="settings")
def s3_settings(tmp_path, s3_env) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{tmp_path / 'meta.db'}",
        bootstrap_key=BOOTSTRAP_KEY,
        max_upload_bytes=2**20,
        artifact_url=s3_env,
    )


def bucket_objects(s3_server, settings: Settings) -> list[str]:
    prefix = settings.artifact_url.removeprefix(f"s3://{BUCKET}/")
    return [p.name for p in s3_server.object_files(prefix)]


def test_a_deployment_through_s3_answers_inferences(server, s3_server, settings, model_bytes):  # noqa: F811
    c = server.client()
    r = upload(c, "tiny", model_bytes)
    assert r.status_code == 201, r.text
    assert bucket_objects(s3_server, settings) == [r.json()["sha256"]]
    # The compile process runs as on another machine: nothing in the local cache, so it reads the bucket.
    shutil.rmtree(settings.artifact_location.cache_dir)
    deployment = deploy_and_wait(c, "tiny")
    assert deployment["status"] == "ready", deployment
    assert len(bucket_objects(s3_server, settings)) == 2  # the graph and its compiled program
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    body = {"inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
    r = c.post("/v2/models/tiny/infer", json=body)
    assert r.status_code == 200, r.text
    want = lm.run(tiny_graph(), {"x": x})["probs"]
    np.testing.assert_allclose(np.array(r.json()["outputs"][0]["data"]).reshape(3, 3), want, rtol=1e-5)


@pytest.mark.parametrize("data", [b"hello, I am not a graph", b"PK\x03\x04" + b"\0" * 200])
def test_a_hostile_file_is_refused_and_never_reaches_the_bucket(server, s3_server, settings, data):  # noqa: F811
    c = server.client()
    r = upload(c, "bad", data)
    assert r.status_code == 400 and r.json()["error"].startswith("invalid .lgraph file: "), r.text
    assert c.get("/v1/models").json() == []
    assert bucket_objects(s3_server, settings) == []
