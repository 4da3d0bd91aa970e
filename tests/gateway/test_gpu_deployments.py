"""Deployments compile for their GPU type's target, and run only where a worker can provide that type.

The platform here finds no GPU (discovery is replaced, so a GPU machine tests the same): an h100 deployment
compiles a CUDA program, then shows `unschedulable` with the reason, its requests are answered 503 and nothing
is billed; a cpu deployment serves and bills "cpu"; a GPU type the compiler has no target for is refused."""

from __future__ import annotations

import pytest

from luminal.compiler.artifact import load_program
from luminal.provisioner import backends
from luminal.provisioner.device_offer import DeviceOffer
from luminal.runtime.cuda.devices import Gpu
from luminal.store.tables import Deployment
from tests.gateway.conftest import deploy_and_wait, upload
from tests.gateway.test_predictions import wait_finished

BODY = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6, 7, 8]}]}
NO_GPU = "no worker can provide h100: this platform's local provisioner found no GPU"


@pytest.fixture(autouse=True)
def gpus(monkeypatch, request):
    """The GPUs the platform's thread workers find: none, unless a test parametrizes this fixture."""
    found = tuple(getattr(request, "param", ()))
    monkeypatch.setattr(backends, "local_offer", lambda: DeviceOffer(found))
    return found


def test_an_h100_deployment_without_a_gpu_is_compiled_for_h100_and_unschedulable(server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    d = deploy_and_wait(c, "tiny", gpu_type="h100")
    assert (d["gpu_type"], d["target"], d["status"], d["error"]) == ("h100", "h100", "unschedulable", NO_GPU)
    with server.platform.db.session() as s:
        key = s.get(Deployment, d["id"]).program_key
    program = load_program(server.platform.artifacts.local_path(key))
    assert program.target == "h100" and "__global__" in program.source  # a CUDA program, not the CPU's C
    assert [x["status"] for x in c.get("/v1/deployments").json()] == ["unschedulable"]
    assert c.get("/v2/models/tiny").json()["platform"] == "luminal_h100"

    r = c.post("/v2/models/tiny/infer", json=BODY)
    assert r.status_code == 503 and r.json()["error"] == NO_GPU
    r = c.get("/v2/models/tiny/ready")
    assert r.status_code == 400 and NO_GPU in r.json()["error"]
    workers = c.get(f"/v1/deployments/{d['id']}/workers").json()
    assert (workers["unschedulable"], workers["replicas"], workers["workers"]) == (NO_GPU, 0, [])
    assert c.get("/v1/usage/records").json() == []  # nothing ran, nothing billed
    assert server.platform.queue.depth(d["id"]) == 0  # refused before admission: nothing waits for a worker


def test_an_unschedulable_deployments_async_prediction_fails_with_the_reason(server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    deploy_and_wait(c, "tiny", gpu_type="h100")
    r = c.post("/v2/models/tiny/infer", json=BODY, headers={"Prefer": "respond-async"})
    assert r.status_code == 202, r.text
    prediction = wait_finished(c, r.json()["id"])
    assert (prediction["status"], prediction["error"]) == ("failed", NO_GPU)


def test_a_cpu_deployment_runs_and_bills_cpu(server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    d = deploy_and_wait(c, "tiny")  # the CPU is the default gpu_type
    assert (d["gpu_type"], d["target"], d["status"]) == ("cpu", "cpu", "ready")
    r = c.post("/v2/models/tiny/infer", json=BODY)
    assert r.status_code == 200, r.text
    records = c.get("/v1/usage/records").json()
    assert records and {rec["gpu_type"] for rec in records} == {"cpu"}
    (worker,) = c.get(f"/v1/deployments/{d['id']}/workers").json()["workers"]
    assert worker["device"] == "cpu"
    assert c.get("/v2/models/tiny").json()["platform"] == "luminal_cpu"


@pytest.mark.parametrize("gpus", [[Gpu(0, "NVIDIA H100 80GB HBM3", "h100")]], indirect=True)
def test_a_gpu_the_platform_found_makes_its_type_schedulable(gpus, server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    d = deploy_and_wait(c, "tiny", gpu_type="h100")
    assert (d["target"], d["status"], d["error"]) == ("h100", "ready", None)


def test_a_priced_gpu_type_without_a_compiler_target_is_refused(server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    r = c.post("/v1/deployments", json={"model": "tiny", "gpu_type": "a10g"})  # priced by the default settings
    assert r.status_code == 400
    assert r.json()["error"].startswith("gpu_type 'a10g' has no compiler target")
    assert "deploy on one of ['a100', 'cpu', 'h100', 'h200', 'l4', 't4']" in r.json()["error"]
    assert c.get("/v1/deployments").json() == []
