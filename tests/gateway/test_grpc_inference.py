"""tritonclient.grpc, unchanged, against a real `luminal serve --grpc-port` process: the same answers, tenancy,
billing and metrics as REST, errors under their gRPC codes, Triton's stream, and the asyncio client at
concurrency. One server for the module (its start and one compile are most of the time)."""

import asyncio

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton
import tritonclient.grpc.aio as triton_aio
from tritonclient.utils import InferenceServerException

from luminal.gateway.oip_grpc import messages as pb
from tests.gateway.conftest import BOOTSTRAP_KEY, RunningServer
from tests.gateway.grpc_serving import serving_tiny
from tests.gateway.tenancy import admin, new_tenant

AUTH = {"authorization": f"Bearer {BOOTSTRAP_KEY}"}
ROWS = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


@pytest.fixture(scope="module")
def serving(tmp_path_factory, model_bytes):
    with serving_tiny(tmp_path_factory.mktemp("grpc-serve"), model_bytes) as served:
        yield served


def _rest_answer(rest: RunningServer, rows: np.ndarray) -> np.ndarray:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(rows.shape), "data": rows.ravel().tolist()}]}
    answer = rest.client().post("/v2/models/tiny/infer", json=body)
    assert answer.status_code == 200, answer.text
    return np.array(answer.json()["outputs"][0]["data"], np.float32).reshape(rows.shape[0], -1)


def _input(rows: np.ndarray) -> triton.InferInput:
    x = triton.InferInput("x", list(rows.shape), "FP32")
    x.set_data_from_numpy(rows)
    return x


def _code(call) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as refused:
        call()
    return refused.value.status(), refused.value.message()


def test_liveness_readiness_and_metadata_are_rests(serving):
    rest, address = serving
    client = triton.InferenceServerClient(address)
    assert client.is_server_live() and client.is_server_ready()
    server = client.get_server_metadata(as_json=True)
    assert server["name"] == "luminal" and "binary_tensor_data" in server["extensions"]
    assert client.is_model_ready("tiny", headers=AUTH)
    assert _plain(client.get_model_metadata("tiny", headers=AUTH)) == rest.client().get("/v2/models/tiny").json()
    versioned = client.get_model_metadata("tiny", "1", headers=AUTH)
    assert _plain(versioned) == rest.client().get("/v2/models/tiny/versions/1").json()


def _plain(metadata) -> dict:
    """Model metadata as REST's JSON (protobuf's own JSON writes int64 shapes as strings)."""
    tensors = lambda ts: [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in ts]  # noqa: E731
    return {
        "name": metadata.name,
        "versions": list(metadata.versions),
        "platform": metadata.platform,
        "inputs": tensors(metadata.inputs),
        "outputs": tensors(metadata.outputs),
    }


def test_raw_tensor_answers_equal_rests(serving):
    rest, address = serving
    client = triton.InferenceServerClient(address)
    answer = client.infer("tiny", [_input(ROWS)], headers=AUTH, request_id="req-1", priority=1, timeout=10**6)
    probs = answer.as_numpy("probs")
    np.testing.assert_allclose(probs, _rest_answer(rest, ROWS), rtol=1e-6)
    assert probs.shape == (3, 3) and answer.get_response().id == "req-1"


def test_typed_contents_in_typed_contents_out_billed_under_the_given_id(serving):
    rest, address = serving
    request = pb.ModelInferRequest(model_name="tiny", id="typed")
    request.inputs.add(name="x", datatype="FP32", shape=[3, 4]).contents.fp32_contents.extend(ROWS.ravel().tolist())
    with grpc.insecure_channel(address) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        response, call = infer.with_call(request, metadata=tuple(AUTH.items()))
    assert not response.raw_output_contents and response.id == "typed"
    probs = np.array(response.outputs[0].contents.fp32_contents, np.float32).reshape(3, 3)
    np.testing.assert_allclose(probs, _rest_answer(rest, ROWS), rtol=1e-6)
    request_id = dict(call.trailing_metadata())["luminal-request-id"]
    billed = {i for record in rest.client().get("/v1/usage/records").json() for i in record["request_ids"]}
    assert request_id in billed  # billed exactly as REST's requests are, under the id the answer gave


def test_errors_map_to_grpc_codes_with_rests_messages(serving):
    _, address = serving
    client = triton.InferenceServerClient(address)
    infer = client.infer
    assert _code(lambda: infer("tiny", [_input(ROWS)]))[0] == "StatusCode.UNAUTHENTICATED"
    bad_key = {"authorization": "Bearer lm_not-a-key"}
    assert _code(lambda: infer("tiny", [_input(ROWS)], headers=bad_key))[0] == "StatusCode.UNAUTHENTICATED"
    assert _code(lambda: infer("absent", [_input(ROWS)], headers=AUTH))[0] == "StatusCode.NOT_FOUND"
    wrong = triton.InferInput("y", [3, 4], "FP32")
    wrong.set_data_from_numpy(ROWS)
    code, message = _code(lambda: infer("tiny", [wrong], headers=AUTH))
    assert code == "StatusCode.INVALID_ARGUMENT" and "unknown input 'y'" in message
    as_int = triton.InferInput("x", [3, 4], "INT32")
    as_int.set_data_from_numpy(ROWS.astype(np.int32))
    code, message = _code(lambda: infer("tiny", [as_int], headers=AUTH))
    assert code == "StatusCode.INVALID_ARGUMENT" and "datatype 'INT32'" in message
    code, message = _code(lambda: infer("tiny", [_input(ROWS)], headers=AUTH, priority=11))
    assert code == "StatusCode.INVALID_ARGUMENT" and "priority" in message
    code, message = _code(lambda: infer("tiny", [_input(ROWS[:, :3].copy())], headers=AUTH))
    assert code == "StatusCode.INVALID_ARGUMENT", message  # the program refuses the shape, as REST's 400
    assert _past_deadline(lambda: infer("tiny", [_input(ROWS)], headers=AUTH, client_timeout=1e-6))


def _past_deadline(call, attempts: int = 20) -> bool:
    """Whether a call made with a deadline already past ends DEADLINE_EXCEEDED. gRPC keeps deadlines in whole
    milliseconds, rounded up, and the tiny model can answer within one: such a call may succeed, so it is tried
    again; any other error fails at once."""
    for _ in range(attempts):
        try:
            call()
        except InferenceServerException as refused:
            assert str(refused.status()) == "StatusCode.DEADLINE_EXCEEDED", refused
            return True
    return False


def test_a_second_tenant_is_refused_the_first_ones_model(serving):
    rest, address = serving
    tenant, http = new_tenant(rest, "other")
    other = {"authorization": f"Bearer {tenant['key']}"}
    client = triton.InferenceServerClient(address)
    assert _code(lambda: client.infer("tiny", [_input(ROWS)], headers=other))[0] == "StatusCode.NOT_FOUND"
    assert _code(lambda: client.get_model_metadata("tiny", headers=other))[0] == "StatusCode.NOT_FOUND"
    assert _code(lambda: client.is_model_ready("tiny", headers=other))[0] == "StatusCode.NOT_FOUND"
    assert http.get("/v2/models/tiny").status_code == 404  # as REST refuses it


def test_a_tenant_over_its_quota_or_suspended_is_refused_as_over_rest(serving):
    rest, address = serving
    client = triton.InferenceServerClient(address)
    tenant, _ = new_tenant(rest, "slow", max_requests_per_second=0.01)  # one request, then one per 100 s
    slow = {"authorization": f"Bearer {tenant['key']}"}
    assert _code(lambda: client.is_model_ready("tiny", headers=slow))[0] == "StatusCode.NOT_FOUND"  # admitted
    code, message = _code(lambda: client.is_model_ready("tiny", headers=slow))
    assert code == "StatusCode.RESOURCE_EXHAUSTED" and "quota" in message
    tenant, _ = new_tenant(rest, "suspended")
    assert admin(rest).post(f"/v1/admin/tenants/{tenant['id']}/suspend").status_code == 200
    suspended = {"authorization": f"Bearer {tenant['key']}"}
    code, message = _code(lambda: client.infer("tiny", [_input(ROWS)], headers=suspended))
    assert code == "StatusCode.PERMISSION_DENIED" and "suspended" in message


def test_stream_answers_each_request_and_reports_bad_ones_in_the_stream(serving):
    rest, address = serving
    answers: list = []
    client = triton.InferenceServerClient(address)
    client.start_stream(callback=lambda result, error: answers.append((result, error)), headers=AUTH)
    batches = [ROWS * k for k in range(1, 5)]
    for k, rows in enumerate(batches):
        client.async_stream_infer("tiny", [_input(rows)], request_id=f"s{k}")
    wrong = triton.InferInput("y", [3, 4], "FP32")
    wrong.set_data_from_numpy(ROWS)
    client.async_stream_infer("tiny", [wrong], request_id="bad")
    client.stop_stream()  # waits for every answer
    results = {r.get_response().id: r.as_numpy("probs") for r, e in answers if e is None}
    errors = [e for _, e in answers if e is not None]
    assert sorted(results) == ["s0", "s1", "s2", "s3"]
    for k, rows in enumerate(batches):
        np.testing.assert_allclose(results[f"s{k}"], _rest_answer(rest, rows), rtol=1e-6)
    assert len(errors) == 1 and "unknown input 'y'" in errors[0].message()


def test_async_client_at_concurrency_gets_each_its_own_answer_counted_in_metrics(serving):
    rest, address = serving
    batches = [ROWS + k for k in range(32)]
    before = _successes(rest)

    async def run() -> list[np.ndarray]:
        async with triton_aio.InferenceServerClient(address) as client:
            calls = [client.infer("tiny", [_input(rows)], headers=AUTH) for rows in batches]
            return [r.as_numpy("probs") for r in await asyncio.gather(*calls)]

    for rows, probs in zip(batches, asyncio.run(run()), strict=True):
        np.testing.assert_allclose(probs, _rest_answer(rest, rows), rtol=1e-6)
    assert _successes(rest) - before == 2 * len(batches)  # the gRPC calls and their REST checks


def _successes(rest: RunningServer) -> float:
    for line in httpx.get(f"{rest.url}/metrics").text.splitlines():
        if line.startswith("nv_inference_request_success{") and 'model="tiny"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
