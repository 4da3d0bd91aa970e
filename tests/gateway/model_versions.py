"""Two versions of one model for the traffic-split tests: the gateway tests' tiny model, and the same graph with
another bias, so the versions take the same request and each answer shows which version computed it."""

from __future__ import annotations

import httpx
import numpy as np

from luminal.graph_file import graph_to_bytes
from tests.gateway.conftest import deploy_and_wait, tiny_graph, upload

BODY = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}


def second_version_bytes() -> bytes:
    return graph_to_bytes(tiny_graph().bind({"b": np.array([0.0, 1.0, 2.0], np.float32)}, strict=True))


def deploy_versions(client: httpx.Client, model_bytes: bytes, name: str = "tiny", **settings) -> list[dict]:
    """`name` versions 1 and 2 uploaded and deployed (ready); their deployments."""
    deployments = []
    for version, data in ((1, model_bytes), (2, second_version_bytes())):
        assert upload(client, name, data).status_code == 201
        deployment = deploy_and_wait(client, name, version=version, **settings)
        assert deployment["status"] == "ready", deployment
        deployments.append(deployment)
    return deployments


def answered_by(client: httpx.Client, name: str = "tiny", version: int | None = None) -> tuple[str, list[float]]:
    """The version an inference reports, and its output."""
    path = f"/v2/models/{name}" + (f"/versions/{version}" if version is not None else "") + "/infer"
    r = client.post(path, json=BODY)
    assert r.status_code == 200, r.text
    return r.json()["model_version"], r.json()["outputs"][0]["data"]
