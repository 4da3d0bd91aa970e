"""A language model's sequence in its caller's trace: the OpenAI route's server span, then the worker's sequence
span with its queue wait, prefill and decode (one event per batched decode step), its context carried in the
sequence request across Redis. The gateway and a thread worker trace in the test process here; tests/gateway/
test_traces.py shows spans coming from a worker process."""

from __future__ import annotations

import secrets

import pytest

from luminal.llm_package import build_package, save_package
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, deploy_and_wait, serving, upload
from tests.gateway.otlp_receiver import OtlpReceiver
from tests.llm_folders import hf_folder
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401 (a fixture)

TOKENS = 4
SERVER = "POST /openai/v1/completions"
SEQUENCE = {"luminal.sequence", "luminal.queue_wait", "luminal.prefill", "luminal.decode"}


@pytest.fixture
def receiver(monkeypatch):
    with OtlpReceiver() as running:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")  # milliseconds
        yield running


def test_completion_traces_its_sequence_with_each_decode_step(tmp_path, receiver, redis_namespace):  # noqa: F811
    settings = Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{tmp_path / 'meta.db'}",
                        bootstrap_key=BOOTSTRAP_KEY, compile_runner=COMPILE_RUNNER, worker_backend="thread",
                        queue_url=REDIS_URL, queue_namespace=redis_namespace)  # fmt: skip
    folder = tmp_path / "llama"
    hf_folder(folder, "llama")
    save_package(build_package(folder, max_batch=2, positions=64), folder / "model.lpkg")
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    with serving(settings) as server:
        http = server.client()
        assert upload(http, "tiny-llama", (folder / "model.lpkg").read_bytes()).status_code == 201
        assert deploy_and_wait(http, "tiny-llama", gpu_type="cpu")["status"] == "ready"
        body = {"model": "tiny-llama", "prompt": "hello world", "max_tokens": TOKENS, "temperature": 0,
                "ignore_eos": True}  # fmt: skip
        answer = http.post("/openai/v1/completions", json=body, headers={"traceparent": f"00-{trace_id}-{span_id}-01"})
        assert answer.status_code == 200, answer.text
        spans = {s.name: s for s in receiver.wait_for_trace(trace_id, {SERVER} | SEQUENCE)}
    assert set(spans) == {SERVER} | SEQUENCE
    server_span, sequence = spans[SERVER], spans["luminal.sequence"]
    assert server_span.parent_id == span_id and server_span.attributes["http.response.status_code"] == 200
    assert sequence.parent_id == server_span.span_id
    assert all(spans[name].parent_id == sequence.span_id for name in SEQUENCE - {"luminal.sequence"})
    assert answer.json()["id"].endswith(sequence.attributes["luminal.request.id"])
    assert sequence.attributes["luminal.completion_tokens"] == TOKENS
    assert sequence.attributes["luminal.finish_reason"] == "length"
    # The first token comes from the prefill; each of the others from one decode step, run alone in its batch.
    decode = spans["luminal.decode"]
    assert decode.attributes["luminal.decode.steps"] == TOKENS - 1 == len(decode.events)
    assert [e.attributes["luminal.batch.size"] for e in decode.events] == [1] * (TOKENS - 1)
    assert spans["luminal.queue_wait"].end_ns <= spans["luminal.prefill"].start_ns
    assert spans["luminal.prefill"].end_ns <= decode.start_ns
    assert all(decode.start_ns <= e.time_ns <= decode.end_ns for e in decode.events)
