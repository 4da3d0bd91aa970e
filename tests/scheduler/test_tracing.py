"""scheduler/tracing.py on its own: when the environment turns tracing on, which service the spans name, and how
contexts are accepted, refused and passed on; spans are read back from an OTLP receiver in the test process."""

from __future__ import annotations

import pytest

from luminal.scheduler import tracing
from tests.gateway.otlp_receiver import OtlpReceiver

TRACE, CALLER = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{CALLER}-01"


@pytest.mark.parametrize(
    "environ, wanted",
    [({}, False), ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
     ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
     ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, False),
     ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, False),
     ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, True)],
)  # fmt: skip
def test_an_endpoint_turns_tracing_on_unless_the_sdk_is_disabled(environ, wanted):
    assert tracing.wanted(environ) is wanted


@pytest.fixture
def receiver(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    with OtlpReceiver() as running:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.endpoint)
        yield running
    tracing.shutdown()


def test_off_without_an_endpoint_makes_no_spans(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert not tracing.configure("luminal-test")
    with tracing.server_span("call", {"traceparent": TRACEPARENT}):
        assert tracing.current_carrier() is None


def test_spans_are_flushed_at_shutdown_under_the_callers_span(receiver):
    assert tracing.configure("luminal-test")
    with tracing.server_span("call", {"TraceParent": TRACEPARENT, "tracestate": "a=1", "cookie": "no"}):
        with tracing.stage("luminal.admission", {"k": 1}):
            carrier = tracing.current_carrier()
    tracing.shutdown()  # no wait: the batch processor's spans are exported before it returns
    spans = {s.name: s for s in receiver.of_trace(TRACE)}
    assert spans["call"].parent_id == CALLER
    assert spans["luminal.admission"].parent_id == spans["call"].span_id
    assert spans["luminal.admission"].attributes == {"k": 1}
    assert spans["call"].resource["service.name"] == "luminal-test"
    # What a worker is sent names the stage as its parent, and keeps the caller's tracestate.
    assert carrier == {"traceparent": f"00-{TRACE}-{spans['luminal.admission'].span_id}-01", "tracestate": "a=1"}
    assert not tracing.enabled()


def test_otel_service_name_wins_over_the_default(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "edge-gateway")
    tracing.configure("luminal-test")
    with tracing.server_span("call", None):
        pass
    tracing.shutdown()
    (span,) = receiver.spans
    assert span.resource["service.name"] == "edge-gateway" and span.parent_id == ""


def test_a_malformed_or_oversized_traceparent_starts_a_new_trace(receiver):
    tracing.configure("luminal-test")
    for carrier in ({"traceparent": "00-not-a-trace-01"}, {"traceparent": TRACEPARENT + " " * 2000}):
        with tracing.server_span("call", carrier):
            pass
    tracing.shutdown()
    assert [(s.name, s.parent_id) for s in receiver.spans] == [("call", ""), ("call", "")]
    assert all(s.trace_id != TRACE for s in receiver.spans)


def test_a_stage_outside_a_traced_request_records_nothing(receiver):
    tracing.configure("luminal-test")
    with tracing.stage("luminal.admission"):
        assert tracing.current_carrier() is None
    tracing.shutdown()
    assert receiver.spans == []
