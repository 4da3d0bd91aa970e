"""An OTLP/HTTP trace receiver inside the test process: what a collector (Jaeger, Tempo, the OpenTelemetry
Collector) would be sent, decoded with the protocol's own messages (`opentelemetry-proto`)."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

T = TypeVar("T")


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_id: str  # "" for a root span
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind
    status: int  # opentelemetry.proto.trace.v1.Status.StatusCode
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]  # the exporting process's: service.name, process.pid
    events: tuple[ReceivedEvent, ...] = ()


@dataclass(frozen=True)
class ReceivedEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def decoded(body: bytes) -> list[ReceivedSpan]:
    message = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in message.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                events = tuple(ReceivedEvent(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in s.events)
                spans.append(ReceivedSpan(s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.kind,
                                          s.status.code, s.start_time_unix_nano, s.end_time_unix_nano,
                                          _attributes(s.attributes), resource, events))  # fmt: skip
    return spans


class OtlpReceiver:
    """Collects the spans POSTed to /v1/traces on a free local port; `endpoint` is OTEL_EXPORTER_OTLP_ENDPOINT."""

    def __init__(self):
        self.spans: list[ReceivedSpan] = []
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver._received(decoded(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:  # the test's output, not the server's access log
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _received(self, spans: list[ReceivedSpan]) -> None:
        with self._arrived:
            self.spans.extend(spans)
            self._arrived.notify_all()

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._arrived:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_until(self, found: Callable[[list[ReceivedSpan]], T | None], timeout_s: float = 30) -> T:
        """What `found` returns for the spans received so far, once it returns something (woken by each export);
        fails with the spans' names after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._arrived:
            while not (result := found(self.spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted((s.name, s.resource.get("service.name")) for s in self.spans)
                    raise AssertionError(f"not found in {timeout_s} s among the spans received: {names}")
                self._arrived.wait(left)
            return result

    def wait_for_trace(self, trace_id: str, names: set[str]) -> list[ReceivedSpan]:
        """The spans of `trace_id` once they include a span of each of `names`."""

        def complete(spans: list[ReceivedSpan]) -> list[ReceivedSpan] | None:
            spans = [s for s in spans if s.trace_id == trace_id]
            return spans if names <= {s.name for s in spans} else None

        return self.wait_until(complete)
