"""The Open Inference Protocol through the real `tritonclient.http` client (JSON and binary modes) against a
uvicorn server, on SQLite and PostgreSQL; answers are checked against the reference interpreter."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

import luminal as lm
from luminal.graph_file import graph_to_bytes
from luminal.store.tenants import create_tenant
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, tiny_graph, upload


def auth() -> dict[str, str]:
    # A fresh dict per call: tritonclient adds Inference-Header-Content-Length to the headers dict it is given,
    # so a shared one would carry a binary request's header into the next JSON request.
    return {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}


def expected(x: np.ndarray) -> np.ndarray:
    return lm.run(tiny_graph(), {"x": x})["probs"]


@pytest.mark.parametrize("binary_in,binary_out", [(False, False), (True, True), (True, False), (False, True)])
def test_tritonclient_infer(deployed, binary_in, binary_out):
    client = triton.InferenceServerClient(url=deployed.host_port)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    inp = triton.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary_in)
    out = triton.InferRequestedOutput("probs", binary_data=binary_out)
    result = client.infer("tiny", [inp], outputs=[out], headers=auth(), request_id="req-1", model_version="1")
    np.testing.assert_allclose(result.as_numpy("probs"), expected(x), rtol=1e-5, atol=1e-6)
    assert result.get_response()["id"] == "req-1"


def test_tritonclient_health_and_metadata(deployed):
    client = triton.InferenceServerClient(url=deployed.host_port)
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata()["extensions"] == ["binary_tensor_data"]
    assert client.is_model_ready("tiny", headers=auth()) and client.is_model_ready("tiny", "1", headers=auth())
    meta = client.get_model_metadata("tiny", headers=auth())
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "probs", "datatype": "FP32", "shape": [-1, 3]}]
    assert not client.is_model_ready("tiny", "2", headers=auth())


def _infer_error(server, inputs, model="tiny", headers=None) -> InferenceServerException:
    client = triton.InferenceServerClient(url=server.host_port)
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, inputs, headers=auth() if headers is None else headers)
    return info.value


def _input(name="x", shape=(2, 4), datatype="FP32", dtype=np.float32, binary=True):
    inp = triton.InferInput(name, list(shape), datatype)
    inp.set_data_from_numpy(np.zeros(shape, dtype), binary_data=binary)
    return inp


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"shape": (2, 5)}, "input 'x' must have shape (batch, 4), got (2, 5)"),
        ({"shape": (2, 4, 1)}, "input 'x' must have shape (batch, 4)"),
        ({"shape": (65, 4)}, "symbol 'batch' = 65 (from input 'x') is outside [1, 64]"),
        ({"datatype": "INT32", "dtype": np.int32}, "input 'x' has datatype 'INT32'; the model takes FP32"),
        ({"name": "y"}, "unknown input 'y'; the model takes ['x']"),
        ({"binary": False, "datatype": "FP64", "dtype": np.float64}, "the model takes FP32"),
    ],
)
def test_bad_tensors_are_400_with_the_reason(deployed, kwargs, message):
    err = _infer_error(deployed, [_input(**kwargs)])
    assert err.status() == "400" and message in err.message(), err.message()


def test_unknown_model_other_tenant_and_keys(deployed):
    err = _infer_error(deployed, [_input()], model="nope")
    assert err.status() == "404" and "model 'nope' is not deployed" in err.message()
    with deployed.platform.db.session() as s:
        _, other_key = create_tenant(s, "other")
    other = {"Authorization": f"Bearer {other_key}"}
    err = _infer_error(deployed, [_input()], headers=other)
    assert err.status() == "404" and "model 'tiny' is not deployed" in err.message()
    assert _infer_error(deployed, [_input()], headers={}).status() == "401"
    assert _infer_error(deployed, [_input()], headers={"Authorization": "Bearer lm_wrong"}).status() == "401"
    other_client = deployed.client(key=other_key)
    assert other_client.get("/v2/models/tiny").status_code == 404
    assert other_client.get("/v2/models/tiny/ready").status_code == 404


def test_raw_bodies_without_content_type(deployed):
    c = deployed.client()
    x = np.ones((1, 4), np.float32)
    header = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]}
    ).encode()
    r = c.post(
        "/v2/models/tiny/infer",
        content=header + x.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    np.testing.assert_allclose(r.json()["outputs"][0]["data"], expected(x).reshape(-1), rtol=1e-5)
    for body, headers, message in [
        (b"{", {}, "not valid JSON"),
        (header + x.tobytes()[:8], {"Inference-Header-Content-Length": str(len(header))}, "ends after 8 of its 16"),
        (header, {"Inference-Header-Content-Length": "-1"}, "outside the body"),
    ]:
        r = c.post("/v2/models/tiny/infer", content=body, headers=headers)
        assert r.status_code == 400 and message in r.json()["error"], r.text
    r = c.post("/v2/models/tiny/versions/x1/infer", content=b"{}")
    assert r.status_code == 400 and "not a positive integer" in r.json()["error"]


def test_oversized_request_is_413(deployed):
    limit = deployed.platform.settings.max_request_bytes
    r = deployed.client().post("/v2/models/tiny/infer", content=b" " * (limit + 1))
    assert r.status_code == 413 and "over the limit" in r.json()["error"]


def mixed_dtype_graph() -> lm.Graph:
    """Two inputs and three outputs of FP32, INT64 and BOOL: every datatype path of the codec."""
    g = lm.Graph()
    n = lm.sym("n", 1, 16)
    a, b = g.input("a", (n,)), g.input("b", (n,), dtype="int64")
    (a + b.cast("float32")).output("sum")
    (a < b.cast("float32")).output("mask")
    (b * 2).output("twice")
    return g


@pytest.mark.parametrize("binary", [False, True])
def test_several_inputs_and_outputs_of_each_datatype(server, binary):
    c = server.client()
    assert upload(c, "mixed", graph_to_bytes(mixed_dtype_graph())).status_code == 201
    assert deploy_and_wait(c, "mixed")["status"] == "ready"
    client = triton.InferenceServerClient(url=server.host_port)
    a, b = np.array([1, 5, 3], np.float32), np.array([2, 2, 2**40], np.int64)
    inputs = [triton.InferInput("a", [3], "FP32"), triton.InferInput("b", [3], "INT64")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=not binary)
    outputs = [triton.InferRequestedOutput(name, binary_data=binary) for name in ("mask", "twice")]
    result = client.infer("mixed", inputs, outputs=outputs, headers=auth())
    want = lm.run(mixed_dtype_graph(), {"a": a, "b": b})
    assert result.get_output("sum") is None  # only the requested outputs come back
    for name in ("mask", "twice"):
        got = result.as_numpy(name)
        assert got.dtype == want[name].dtype and np.array_equal(got, want[name]), name
    meta = client.get_model_metadata("mixed", headers=auth())
    assert [(t["name"], t["datatype"]) for t in meta["outputs"]] == [
        ("sum", "FP32"),
        ("mask", "BOOL"),
        ("twice", "INT64"),
    ]


def test_concurrent_requests_each_get_their_own_answer(deployed):
    """The direct backend serialises calls into one program (its arena is shared): answers never mix."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(7)
    batches = [rng.standard_normal((int(rng.integers(1, 9)), 4)).astype(np.float32) for _ in range(48)]

    client = deployed.client()  # httpx clients are thread-safe; one pool of connections for all threads

    def call(x: np.ndarray) -> np.ndarray:
        body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
        out = client.post("/v2/models/tiny/infer", json=body).json()["outputs"][0]
        return np.array(out["data"], np.float32).reshape(out["shape"])

    with client, ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, batches))
    for x, got in zip(batches, answers, strict=True):
        np.testing.assert_allclose(got, expected(x), rtol=1e-5, atol=1e-6)
