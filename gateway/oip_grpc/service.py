"""`inference.GRPCInferenceService` on the gateway's platform: the REST API's OIP calls over gRPC.

Every call goes through the functions REST's routes call: the bearer key (metadata `authorization: Bearer <key>`)
and the tenant's standing (`tenant_with_key`), the deployment lookup (`resolve_ready`, `metadata_of`), and one
inference path (`prepare_decoded`, `run_prepared`: admission, queue, batching, execution, billing, metrics). Only
the messages differ (oip_grpc/tensors.py). Liveness, readiness and server metadata need no key, as over REST.

The call's gRPC deadline bounds the request's wait in the queue as Triton's `timeout` parameter does (the earlier
of the two counts), so a request whose caller has given up is dropped unexecuted and unbilled.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import grpc
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import tenant_with_key
from luminal.gateway.oip_grpc import messages as pb
from luminal.gateway.oip_grpc.status_codes import grpc_status
from luminal.gateway.oip_grpc.tensors import model_infer_response, parse_model_infer
from luminal.gateway.platform import Platform
from luminal.gateway.routers.inference import (
    ADMISSION,
    ANSWER,
    INLINE_PARSE_BYTES,
    metadata_of,
    prepare_decoded,
    resolve_ready,
    run_prepared,
    unready_reason,
)
from luminal.gateway.routers.server import EXTENSIONS, SERVER_NAME, SERVER_VERSION, unready_database
from luminal.gateway.tensor_codec import InferRequest
from luminal.scheduler import tracing
from luminal.store.tables import Tenant

SERVICE = "inference.GRPCInferenceService"
# Sent with each answered inference, as REST's Luminal-Request-Id header: the id its usage record is billed under.
REQUEST_ID_KEY = "luminal-request-id"
# The codes OpenTelemetry's conventions count as the server's failure (the others are the caller's errors).
_CODE = grpc.StatusCode
SERVER_FAILURES = frozenset({_CODE.UNKNOWN, _CODE.DEADLINE_EXCEEDED, _CODE.UNIMPLEMENTED, _CODE.INTERNAL,
                             _CODE.UNAVAILABLE, _CODE.DATA_LOSS})  # fmt: skip


class InferenceService:
    def __init__(self, platform: Platform):
        self.platform = platform

    async def ServerLive(self, request: pb.ServerLiveRequest, context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest, context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await unready_database(self.platform.db) is None)

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name=SERVER_NAME, version=SERVER_VERSION, extensions=EXTENSIONS)

    async def ModelReady(self, request: pb.ModelReadyRequest, context) -> pb.ModelReadyResponse:
        """Ready or not, as REST's `/ready`; a model the tenant does not have is NOT_FOUND, as REST's 404."""
        tenant = await self._tenant(context)
        why_not = await run_in_threadpool(unready_reason, self.platform, tenant, request.name, request.version or None)
        return pb.ModelReadyResponse(ready=why_not is None)

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context) -> pb.ModelMetadataResponse:
        tenant = await self._tenant(context)
        meta = await run_in_threadpool(metadata_of, self.platform.db, tenant, request.name, request.version or None)
        response = pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"], platform=meta["platform"])
        for spec in meta["inputs"]:
            response.inputs.add(name=spec["name"], datatype=spec["datatype"], shape=spec["shape"])
        for spec in meta["outputs"]:
            response.outputs.add(name=spec["name"], datatype=spec["datatype"], shape=spec["shape"])
        return response

    async def ModelInfer(self, request: pb.ModelInferRequest, context) -> pb.ModelInferResponse:
        with _server_span("ModelInfer", context, request):
            try:
                response, request_id = await self._infer(partial(self._tenant, context), request,
                                                         context.time_remaining())  # fmt: skip
            except Exception as exc:
                _traced_status(grpc_status(exc)[0])
                raise
            _traced_status(grpc.StatusCode.OK)
        context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
        return response

    async def ModelStreamInfer(
        self, requests: AsyncIterator[pb.ModelInferRequest], context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Each request runs as it arrives, so a stream's requests batch together; each answer (or its error, in
        `error_message`, as Triton sends it) is sent as it completes, matched to its request by `id`. The key is
        checked once; the tenant's standing (suspension, requests per second) for every request. Each request is
        traced on its own, under the call's `traceparent`."""
        authorization = _authorization(context)
        await tenant_with_key(self.platform, authorization)  # a bad key fails the call before any request is read
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()

        async def answer(request: pb.ModelInferRequest) -> None:
            with _server_span("ModelStreamInfer", context, request):
                try:
                    # The key is cached: this re-checks only the standing.
                    standing = partial(tenant_with_key, self.platform, authorization)
                    response, _ = await self._infer(standing, request, context.time_remaining())
                    _traced_status(grpc.StatusCode.OK)
                    await answers.put(pb.ModelStreamInferResponse(infer_response=response))
                except Exception as exc:
                    code, message = grpc_status(exc)
                    _traced_status(code)
                    await answers.put(pb.ModelStreamInferResponse(error_message=f"{code.name}: {message}"))

        async def read_all() -> None:
            try:
                async with asyncio.TaskGroup() as running:
                    async for request in requests:
                        running.create_task(answer(request))
            finally:
                await answers.put(None)  # every request is answered (or reading failed): the stream ends

        reader = asyncio.create_task(read_all())
        try:
            while (response := await answers.get()) is not None:
                yield response
            await reader  # a failure reading the stream is the call's error
        finally:
            reader.cancel()  # the client went away: its requests' answers have no one to go to

    async def _tenant(self, context) -> Tenant:
        return await tenant_with_key(self.platform, _authorization(context))

    async def _infer(
        self, authorize: Callable[[], Awaitable[Tenant]], request: pb.ModelInferRequest, seconds_left: float | None
    ) -> tuple[pb.ModelInferResponse, str]:
        """The inference path REST's `answer_inference` takes, for one message: its answer and billed request id.
        `authorize` checks the caller's key and standing (within the admission stage of a traced call)."""
        name, version = request.model_name, request.model_version or None
        with tracing.stage(ADMISSION):
            tenant = await authorize()
            d = await resolve_ready(self.platform, tenant, name, version)
            decode = partial(_decoded_within, request, d["signature"], seconds_left)
            inline = request.ByteSize() <= INLINE_PARSE_BYTES
            prepared = await prepare_decoded(self.platform.metrics, tenant, name, d, decode, inline)
        result = await run_prepared(self.platform, prepared)
        typed = not request.raw_input_contents
        with tracing.stage(ANSWER):
            response = model_infer_response(name, d["version"], prepared.parsed, result.outputs, d["signature"], typed)
        return response, result.request_id


def _server_span(method: str, context, request: pb.ModelInferRequest):
    """The server span of one inference, child of the caller's span when the call's metadata has a `traceparent`."""
    attributes = {"rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": method,
                  "luminal.model.name": request.model_name}  # fmt: skip
    return tracing.server_span(f"{SERVICE}/{method}", context.invocation_metadata() or (), attributes)


def _traced_status(code: grpc.StatusCode) -> None:
    tracing.grpc_answered(code.value[0], failed=code in SERVER_FAILURES)


def _decoded_within(request: pb.ModelInferRequest, signature: dict[str, Any], seconds_left: float | None):
    parsed: InferRequest = parse_model_infer(request, signature)
    if seconds_left is None:
        return parsed
    deadline_us = max(1, int(seconds_left * 1e6))
    if parsed.timeout_us is None or deadline_us < parsed.timeout_us:
        parsed = dataclasses.replace(parsed, timeout_us=deadline_us)
    return parsed


def _authorization(context) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return value
    return None


def _unary(method: Callable[[Any, Any], Awaitable[Any]]):
    """`method` answering a failure with its gRPC status and REST's message."""

    async def handle(request, context):
        try:
            return await method(request, context)
        except Exception as exc:
            code, message = grpc_status(exc)
            await context.abort(code, message)

    return handle


def _streaming(method):
    async def handle(requests, context):
        try:
            async for response in method(requests, context):
                yield response
        except Exception as exc:
            code, message = grpc_status(exc)
            await context.abort(code, message)

    return handle


def service_handler(service: InferenceService) -> grpc.GenericRpcHandler:
    """The service's calls as gRPC method handlers, with the protocol's message types."""
    unary = {
        "ServerLive": (pb.ServerLiveRequest, pb.ServerLiveResponse),
        "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse),
        "ServerMetadata": (pb.ServerMetadataRequest, pb.ServerMetadataResponse),
        "ModelReady": (pb.ModelReadyRequest, pb.ModelReadyResponse),
        "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse),
        "ModelInfer": (pb.ModelInferRequest, pb.ModelInferResponse),
    }
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            _unary(getattr(service, name)),
            request_deserializer=req.FromString,
            response_serializer=res.SerializeToString,
        )
        for name, (req, res) in unary.items()
    }
    handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
        _streaming(service.ModelStreamInfer),
        request_deserializer=pb.ModelInferRequest.FromString,
        response_serializer=pb.ModelStreamInferResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(SERVICE, handlers)
