"""OpenTelemetry traces of inference requests, exported over OTLP/HTTP to a receiver in the test process.

One `luminal serve` process on Redis, with worker processes, serves the module: a call carrying a W3C
`traceparent` yields one tree of spans in the caller's trace, from the gateway's server span through admission,
dispatch and the answer, to the queue wait, batch and execution spans the worker process exports itself. With
tracing off, nothing is exported and the answers are the same."""

from __future__ import annotations

import queue
import secrets
import uuid

import httpx
import numpy as np
import pytest
import redis
import tritonclient.grpc as triton_grpc
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from luminal.scheduler import tracing
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, serving, upload
from tests.gateway.grpc_serving import serving_tiny
from tests.gateway.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.scheduler.queue_fixtures import REDIS_URL

GATEWAY = {"POST /v2/models/{name}/infer", "luminal.admission", "luminal.dispatch", "luminal.answer"}
WORKER = {"luminal.queue_wait", "luminal.batch", "luminal.execute"}
ROWS = np.array([[0.1, 0.2, 0.3, 0.4], [1.0, 0.0, -1.0, 2.0]], np.float32)
BODY = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": ROWS.ravel().tolist()}]}
AUTH = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}


def caller() -> tuple[str, str, str]:
    """(trace id, span id, traceparent) of a sampled caller span."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def traced(tmp_path_factory, model_bytes, receiver):
    """(REST server, gRPC address) of `luminal serve` on Redis with worker processes, tracing to `receiver`."""
    namespace = f"lmtest-{uuid.uuid4().hex[:12]}"
    env = {
        "LUMINAL_QUEUE_URL": REDIS_URL,
        "LUMINAL_QUEUE_NAMESPACE": namespace,
        "LUMINAL_WORKER_BACKEND": "process",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "20",  # milliseconds: spans reach the receiver at once, not after 5 s
    }
    try:
        with serving_tiny(tmp_path_factory.mktemp("traced"), model_bytes, **env) as running:
            yield running
    finally:
        keys = redis.Redis.from_url(REDIS_URL)
        for key in keys.scan_iter(match=f"{namespace}:*", count=500):
            keys.delete(key)
        keys.close()


def _one_tree(spans: list[ReceivedSpan], root_parent: str) -> dict[str, ReceivedSpan]:
    """The spans by name, checked to form one tree under `root_parent` (each name once, each parent present)."""
    by_id = {s.span_id: s for s in spans}
    assert len({s.name for s in spans}) == len(spans), sorted(s.name for s in spans)
    roots = [s for s in spans if s.parent_id == root_parent]
    assert len(roots) == 1, [(s.name, s.parent_id) for s in spans]
    for s in spans:
        assert s is roots[0] or s.parent_id in by_id, f"{s.name}'s parent {s.parent_id} is not in the trace"
        assert s.start_ns <= s.end_ns, s.name
    return {s.name: s for s in spans}


def traced_call(rest, body: dict = BODY, **headers: str) -> tuple[httpx.Response, str, str]:
    """(the answer, its trace id, the caller's span id) of an infer call made under a new caller span."""
    trace_id, span_id, traceparent = caller()
    headers = {**AUTH, "traceparent": traceparent, **headers}
    return httpx.post(f"{rest.url}/v2/models/tiny/infer", json=body, headers=headers, timeout=60), trace_id, span_id


def _parent(spans: dict[str, ReceivedSpan], name: str) -> str:
    parent_id = spans[name].parent_id
    return next(s.name for s in spans.values() if s.span_id == parent_id)


def test_rest_call_is_one_trace_across_the_worker_process(traced, receiver):
    answer, trace_id, span_id = traced_call(traced[0], tracestate="vendor=opaque")
    assert answer.status_code == 200, answer.text
    spans = _one_tree(receiver.wait_for_trace(trace_id, GATEWAY | WORKER), root_parent=span_id)
    assert set(spans) == GATEWAY | WORKER
    server = spans["POST /v2/models/{name}/infer"]
    assert server.kind == Span.SPAN_KIND_SERVER
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["luminal.model.name"] == "tiny"
    for stage in ("luminal.admission", "luminal.dispatch", "luminal.answer"):
        assert _parent(spans, stage) == server.name
    # The worker's spans hang under the gateway's dispatch span, sent across Redis with the queued request.
    assert _parent(spans, "luminal.queue_wait") == _parent(spans, "luminal.batch") == "luminal.dispatch"
    assert _parent(spans, "luminal.execute") == "luminal.batch"
    gateway, worker = server.resource, spans["luminal.execute"].resource
    assert gateway["service.name"] == "luminal-gateway" and worker["service.name"] == "luminal-worker"
    assert gateway["process.pid"] != worker["process.pid"]
    assert all(spans[name].resource == worker for name in WORKER)
    batch = spans["luminal.batch"]
    assert batch.attributes["luminal.batch.size"] == 1
    assert batch.attributes["luminal.model.name"] == "tiny" and batch.attributes["luminal.model.version"] == 1
    assert batch.attributes["luminal.deployment.id"] == spans["luminal.dispatch"].attributes["luminal.deployment.id"]
    assert batch.attributes["luminal.request.id"] == answer.headers["Luminal-Request-Id"]
    # Stages in order on the gateway's clock; the execution within its batch on the worker's.
    assert spans["luminal.admission"].end_ns <= spans["luminal.dispatch"].start_ns
    assert spans["luminal.dispatch"].end_ns <= spans["luminal.answer"].start_ns
    assert batch.start_ns <= spans["luminal.execute"].start_ns <= spans["luminal.execute"].end_ns <= batch.end_ns


def test_grpc_call_joins_the_callers_trace(traced, receiver):
    _, address = traced
    trace_id, span_id, traceparent = caller()
    x = triton_grpc.InferInput("x", list(ROWS.shape), "FP32")
    x.set_data_from_numpy(ROWS)
    with triton_grpc.InferenceServerClient(address) as client:
        headers = {"authorization": f"Bearer {BOOTSTRAP_KEY}", "traceparent": traceparent}
        client.infer("tiny", [x], headers=headers)
    server_name = "inference.GRPCInferenceService/ModelInfer"
    wanted = {server_name, "luminal.admission", "luminal.dispatch", "luminal.answer"} | WORKER
    spans = _one_tree(receiver.wait_for_trace(trace_id, wanted), root_parent=span_id)
    assert spans[server_name].attributes["rpc.method"] == "ModelInfer"
    assert spans[server_name].attributes["rpc.grpc.status_code"] == 0
    assert _parent(spans, "luminal.batch") == "luminal.dispatch"


def test_grpc_stream_traces_each_request_under_the_calls_span(traced, receiver):
    _, address = traced
    trace_id, span_id, traceparent = caller()
    answers: queue.Queue = queue.Queue()
    x = triton_grpc.InferInput("x", list(ROWS.shape), "FP32")
    x.set_data_from_numpy(ROWS)
    with triton_grpc.InferenceServerClient(address) as client:
        headers = {"authorization": f"Bearer {BOOTSTRAP_KEY}", "traceparent": traceparent}
        client.start_stream(lambda result, error: answers.put(error), headers=headers)
        for k in range(2):
            client.async_stream_infer("tiny", [x], request_id=f"s{k}")
        assert [answers.get(timeout=60) for _ in range(2)] == [None, None]
        client.stop_stream()
    server_name = "inference.GRPCInferenceService/ModelStreamInfer"

    def both_answered(spans: list[ReceivedSpan]) -> list[ReceivedSpan] | None:
        mine = [s for s in spans if s.trace_id == trace_id]
        ends = [s for s in mine if s.name in ("luminal.execute", server_name)]  # outermost and innermost, twice
        return mine if len(ends) == 4 else None

    spans = receiver.wait_until(both_answered)
    by_id = {s.span_id: s for s in spans}
    servers = [s for s in spans if s.name == server_name]
    assert len(servers) == 2 and all(s.parent_id == span_id for s in servers)
    for execute in (s for s in spans if s.name == "luminal.execute"):
        chain = [execute]
        while chain[-1].parent_id in by_id:
            chain.append(by_id[chain[-1].parent_id])
        assert [s.name for s in chain] == ["luminal.execute", "luminal.batch", "luminal.dispatch", server_name]
    assert {s.span_id for s in servers} == {by_id[s.parent_id].parent_id for s in spans if s.name == "luminal.batch"}


def test_asynchronous_prediction_continues_the_requests_trace(traced, receiver):
    accepted, trace_id, span_id = traced_call(traced[0], Prefer="respond-async")
    assert accepted.status_code == 202, accepted.text
    server_name = "POST /v2/models/{name}/infer"
    wanted = {server_name, "luminal.admission", "luminal.prediction", "luminal.dispatch"} | WORKER
    spans = _one_tree(receiver.wait_for_trace(trace_id, wanted), root_parent=span_id)
    assert set(spans) == wanted  # the 202 is sent without an answer stage
    assert spans[server_name].attributes["http.response.status_code"] == 202
    assert _parent(spans, "luminal.prediction") == server_name
    assert spans["luminal.prediction"].attributes["luminal.prediction.id"] == accepted.json()["id"]
    assert _parent(spans, "luminal.dispatch") == "luminal.prediction"
    assert _parent(spans, "luminal.batch") == "luminal.dispatch"


def test_refused_call_is_traced_without_worker_spans(traced, receiver):
    """A 400 (an input the model does not take) is recorded on its server span as the caller's error, not the
    server's; nothing was queued, so no worker span."""
    body = {"inputs": [{"name": "y", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    answer, trace_id, span_id = traced_call(traced[0], body)
    assert answer.status_code == 400
    server_name = "POST /v2/models/{name}/infer"
    spans = _one_tree(receiver.wait_for_trace(trace_id, {server_name, "luminal.admission"}), span_id)
    assert set(spans) == {server_name, "luminal.admission"}
    assert spans[server_name].attributes["http.response.status_code"] == 400
    assert spans[server_name].status != Status.STATUS_CODE_ERROR


def test_a_call_without_traceparent_starts_its_own_trace(traced, receiver):
    rest, _ = traced
    answer = httpx.post(f"{rest.url}/v2/models/tiny/infer", json=BODY, headers=AUTH, timeout=60)
    assert answer.status_code == 200
    request_id = answer.headers["Luminal-Request-Id"]

    def trace_of_request(spans: list[ReceivedSpan]) -> str | None:
        answered = [s for s in spans if s.name == "luminal.batch" and s.attributes["luminal.request.id"] == request_id]
        return answered[0].trace_id if answered else None

    trace_id = receiver.wait_until(trace_of_request)
    _one_tree(receiver.wait_for_trace(trace_id, GATEWAY | WORKER), root_parent="")


def test_tracing_off_exports_nothing_and_answers_the_same(tmp_path, model_bytes, receiver, traced, monkeypatch):
    """OTEL_SDK_DISABLED wins over an endpoint: no span is made or sent, and the answer is the traced one's."""
    rest, _ = traced
    traced_answer = httpx.post(f"{rest.url}/v2/models/tiny/infer", json=BODY, headers=AUTH, timeout=60)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    settings = Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{tmp_path / 'meta.db'}",
                        bootstrap_key=BOOTSTRAP_KEY, compile_runner="thread")  # fmt: skip
    trace_id, _, traceparent = caller()
    with serving(settings) as server:
        client = server.client()
        assert upload(client, "tiny", model_bytes).status_code == 201
        assert deploy_and_wait(client, "tiny")["status"] == "ready"
        answer = client.post("/v2/models/tiny/infer", json=BODY, headers={"traceparent": traceparent})
        assert not tracing.enabled()
    # The server has stopped, which flushes any span a tracer held: had one been made (in the caller's trace, as
    # the traceparent is sampled), it would have arrived.
    assert receiver.of_trace(trace_id) == []
    assert answer.status_code == 200, answer.text
    assert answer.json() == traced_answer.json()
    assert set(answer.headers) - {"date"} == set(traced_answer.headers) - {"date"}
