"""OpenTelemetry traces of requests: one per process, exported over OTLP/HTTP, off unless an endpoint is set.

`configure` (the gateway at start, each worker process at start) turns tracing on when the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set and `OTEL_SDK_DISABLED` is not;
the SDK reads the other OTEL_* variables itself (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_TRACES_SAMPLER`, `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_EXPORTER_OTLP_HEADERS`...). Spans leave through a batch
processor, off the request's path; `shutdown` flushes what is left.

Off, every hook is one test of a module global: no SDK is imported and no span object is made, so the hot path
pays nothing measurable (the no-op spans of the API alone cost microseconds per request). The SDK's tracer
provider is held here rather than installed globally, because OpenTelemetry refuses to replace a global one and
a process (a test's) may start several platforms.

Context crosses processes as W3C Trace Context (`traceparent`, `tracestate`): accepted from HTTP headers and
gRPC metadata, and carried with each queued request (`InferenceRequest.trace`) to the worker that executes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# The W3C headers a carrier holds; nothing else of a client's headers or metadata is read.
CARRIER_KEYS = ("traceparent", "tracestate")
MAX_CARRIER_CHARS = 1024  # tracestate is capped at 32 members of ~256 chars by W3C; more is not a trace context

_PROPAGATOR = TraceContextTextMapPropagator()
_NOTHING = contextlib.nullcontext()

_tracer: trace.Tracer | None = None  # None: tracing is off in this process
_provider: Any = None  # the SDK's TracerProvider, flushed and shut down by `shutdown`


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint is set and the SDK is not disabled."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def configure(default_service_name: str) -> bool:
    """Export this process's spans when the environment asks for it (`wanted`); whether tracing is now on.
    `default_service_name` is the resource's service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
    names one."""
    global _tracer, _provider
    if _tracer is not None or not wanted():
        return _tracer is not None
    # The SDK and exporter are imported only here: a process that does not trace never loads them.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import PROCESS_PID, SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol != "http/protobuf":
        log.warning("OTLP protocol %r is not supported: traces are sent as http/protobuf", protocol)
    resource = Resource.create({PROCESS_PID: os.getpid()})
    if str(resource.attributes.get(SERVICE_NAME, "unknown_service")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: default_service_name}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _provider, _tracer = provider, provider.get_tracer("luminal")
    log.info("exporting traces over OTLP as %s", resource.attributes[SERVICE_NAME])
    return True


def shutdown() -> None:
    """Export the spans still buffered and turn tracing off (a later `configure` may turn it on again)."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    return _tracer is not None


def tracer() -> trace.Tracer | None:
    """This process's tracer, None when tracing is off."""
    return _tracer


def server_span(name: str, carrier: Mapping[str, str] | None, attributes: Mapping[str, Any] | None = None):
    """The span of one request this process serves, current inside the `with`, child of the caller's span when
    `carrier` holds a valid `traceparent`; a no-op when tracing is off."""
    if _tracer is None:
        return _NOTHING
    parent = _PROPAGATOR.extract(carrier_of(carrier)) if carrier else None
    # The caller records the status (`http_answered`, `grpc_answered`): a refused request may leave as an exception
    # (gRPC's errors do), and that is the caller's error, not the span's.
    return _tracer.start_as_current_span(
        name, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes, set_status_on_exception=False
    )


def continued(name: str, carrier: Mapping[str, str] | None, attributes: Mapping[str, Any] | None = None):
    """A span of work done later for a traced request (an asynchronous prediction), child of the span `carrier`
    names (`current_carrier()` taken while the request was served), current inside; a no-op without one."""
    if _tracer is None or not carrier:
        return _NOTHING
    return _tracer.start_as_current_span(name, context=_PROPAGATOR.extract(carrier), attributes=attributes)


def stage(name: str, attributes: Mapping[str, Any] | None = None):
    """A child span of the current request's span, current inside the `with`. Only within a traced request: a
    stage outside one (an untraced route, a background job) records nothing rather than starting a stray trace."""
    if _tracer is None or not trace.get_current_span().is_recording():
        return _NOTHING
    return _tracer.start_as_current_span(name, attributes=attributes)


def http_answered(status_code: int) -> None:
    """Record the current server span's HTTP status; only a 5xx is the span's error (a 4xx is the caller's)."""
    _answered("http.response.status_code", status_code, failed=status_code >= 500)


def grpc_answered(code: int, failed: bool) -> None:
    """Record the current server span's gRPC status code; `failed`: a code the server is to blame for."""
    _answered("rpc.grpc.status_code", code, failed)


def _answered(attribute: str, status: int, failed: bool) -> None:
    if _tracer is None:
        return
    span = trace.get_current_span()
    span.set_attribute(attribute, status)
    if failed:
        span.set_status(trace.Status(trace.StatusCode.ERROR))


def set_attributes(attributes: Mapping[str, Any]) -> None:
    """Add attributes to the current span (learnt after it started: a status code, a model version)."""
    if _tracer is not None:
        trace.get_current_span().set_attributes(attributes)


def current_carrier() -> dict[str, str] | None:
    """The current span's W3C context, to send with work another process executes; None when there is none."""
    if _tracer is None or not trace.get_current_span().is_recording():
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier or None


def carrier_of(pairs: Mapping[str, str] | Any) -> dict[str, str]:
    """The W3C entries of headers, gRPC metadata (key, value pairs) or a decoded carrier; oversized values are
    dropped (the propagator then starts a new trace, as for any malformed traceparent)."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    found = {}
    for key, value in items:
        key = key.lower() if isinstance(key, str) else ""
        if key in CARRIER_KEYS and isinstance(value, str) and len(value) <= MAX_CARRIER_CHARS:
            found[key] = value
    return found


def parent_context(carrier: Mapping[str, str] | None):
    """The OpenTelemetry context whose span `carrier` names (for spans started with explicit times)."""
    return _PROPAGATOR.extract(carrier_of(carrier or {}))
