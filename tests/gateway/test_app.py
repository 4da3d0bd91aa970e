"""The app's wiring: every resource's routes are mounted and documented; health needs no key."""

from fastapi.testclient import TestClient

from luminal.gateway.app import create_app


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
