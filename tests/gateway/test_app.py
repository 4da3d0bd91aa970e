"""The app's wiring: every resource's routes are mounted and documented; health needs no key."""

import numpy as np
from fastapi.testclient import TestClient

from luminal.gateway.app import create_app
from luminal.scheduler.work import OK, InferenceResult
from luminal.store.tenants import tenant_for_key
from tests.gateway.conftest import BOOTSTRAP_KEY


def test_openapi_documents_every_resource(settings):
    with TestClient(create_app(settings)) as client:
        spec = client.get("/openapi.json").json()
        assert client.get("/v2/health/live").json() == {"live": True}
        assert client.get("/v2/health/ready").json() == {"ready": True}
    paths = set(spec["paths"])
    assert {"/v1/models", "/v1/deployments", "/v2/models/{name}/versions/{version}/infer", "/v2"} <= paths
    create = spec["paths"]["/v1/deployments"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"model", "gpu_type", "max_batch_size"} <= set(create["properties"])
    assert "application/octet-stream" in spec["paths"]["/v1/models"]["post"]["requestBody"]["content"]


class RecordingBackend:
    """A stand-in for the scheduler: what the router hands an InferenceBackend."""

    def __init__(self):
        self.calls = []

    async def infer(self, deployment, request):
        self.calls.append((deployment, request))
        return InferenceResult(request.id, OK, {"probs": np.full((request.inputs["x"].shape[0], 3), 0.5, np.float32)})


def test_inference_goes_through_the_backend_interface(settings, model_bytes):
    backend = RecordingBackend()
    with TestClient(create_app(settings, backend=backend)) as client:
        client.headers["Authorization"] = f"Bearer {BOOTSTRAP_KEY}"
        assert client.post("/v1/models", params={"name": "tiny"}, content=model_bytes).status_code == 201
        deployment = client.post("/v1/deployments", json={"model": "tiny"}).json()
        client.app.state.platform.compiles.drain(timeout=120)
        x = {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": list(range(8))}
        r = client.post("/v2/models/tiny/infer", json={"inputs": [x]})
        with client.app.state.platform.db.session() as session:
            tenant_id = tenant_for_key(session, BOOTSTRAP_KEY).id
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [0.5] * 6
    ((ref, request),) = backend.calls
    assert (ref.deployment_id, ref.tenant_id, len(ref.program_key)) == (deployment["id"], tenant_id, 64)
    assert (request.deployment_id, request.tenant_id, request.priority) == (deployment["id"], tenant_id, 5)
    np.testing.assert_array_equal(request.inputs["x"], np.arange(8, dtype=np.float32).reshape(2, 4))


class ForgetfulBackend:
    async def infer(self, deployment, request):
        return InferenceResult(request.id, OK, {})  # a broken backend: no outputs at all


def test_a_backend_that_drops_outputs_is_a_500_not_a_wrong_answer(settings, model_bytes):
    with TestClient(create_app(settings, backend=ForgetfulBackend()), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {BOOTSTRAP_KEY}"
        client.post("/v1/models", params={"name": "tiny"}, content=model_bytes)
        client.post("/v1/deployments", json={"model": "tiny"})
        client.app.state.platform.compiles.drain(timeout=120)
        x = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}
        r = client.post("/v2/models/tiny/infer", json={"inputs": [x]})
    assert r.status_code == 500 and r.json() == {"error": "internal error"}
