"""OIP model endpoints: `/v2/models/{name}[/versions/{version}]` metadata, `.../ready` and `.../infer`.

A name is the tenant's model name; without a version the model's traffic split picks the version that answers
(gateway/traffic_routing.py), or the newest deployed version answers when it has none. Another tenant's
model is reported exactly like a missing one (404), so names cannot be probed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import DatabaseDep, PlatformDep, TenantDep, tenant_of
from luminal.gateway.errors import ApiError
from luminal.gateway.inference_backend import DeploymentRef
from luminal.gateway.metrics import InferenceMetrics, ModelLabels, observed_infer
from luminal.gateway.platform import Platform
from luminal.gateway.predictions import PredictionJob, accepted_response, prefers_async
from luminal.gateway.request_body import read_capped_body
from luminal.gateway.schemas import ModelNameInPath, tensor_specs
from luminal.gateway.tensor_codec import InferRequest, TensorError, encode_infer_response, parse_infer_request
from luminal.gateway.text_inference import answer_text_inference
from luminal.gateway.text_tensors import TEXT_INPUT, is_text_request
from luminal.gateway.traffic_routing import no_ready_version, read_ready_split, routed_version
from luminal.gateway.uploads import EMBEDDING_KIND, LLM_KIND
from luminal.gateway.webhooks import DEFAULT_EVENTS
from luminal.scheduler import tracing
from luminal.scheduler.work import InferenceRequest, InferenceResult, effective_priority
from luminal.store import deployments as deployment_store
from luminal.store.database import Database
from luminal.store.tables import Tenant

router = APIRouter(prefix="/v2/models", tags=["inference"])
HEADER_LENGTH = "Inference-Header-Content-Length"
# The id a 200 answer is billed under (the usage records list it), so a client can reconcile answers with the bill.
HEADER_REQUEST_ID = "Luminal-Request-Id"
# A body this small decodes in tens of microseconds: on the event loop, that is cheaper than a thread hop.
INLINE_PARSE_BYTES = 64 * 1024
# The stages of a request's trace on the gateway (scheduler/tracing.py): checking the key, the tenant's standing,
# the deployment and the body; and encoding the answer. Between them, the backend's queue round trip.
ADMISSION, ANSWER = "luminal.admission", "luminal.answer"


def _parse_version(version: str | None) -> int | None:
    if version is None:
        return None
    if not (version.isascii() and version.isdigit()) or len(version) > 9:  # str.isdigit() also admits '²'
        raise ApiError(400, f"model version {version!r:.40} is not a positive integer")
    return int(version)


def _resolve(db: Database, tenant: Tenant, name: str, version: str | None) -> dict[str, Any]:
    """The deployment's facts as plain values (read in one short transaction)."""
    with db.session() as session:
        row = deployment_store.deployment_for_model(session, tenant, name, _parse_version(version))
        mv = row.model_version
        all_versions = [str(v.version) for v in mv.model.versions if v.deployment is not None]
        return {
            "id": row.id,
            "status": row.status,
            "error": row.error,
            "program_key": row.program_key,
            "graph_key": mv.artifact_key,  # the upload: an embedding package's tokenizer is read from it
            "gpu_type": row.gpu_type,
            "max_batch_size": row.max_batch_size,
            "max_queue_delay_ms": row.max_queue_delay_ms,
            "prefill_chunk": row.prefill_chunk,
            "max_waiting": row.max_waiting,
            "version": str(mv.version),
            "versions": all_versions,
            "signature": mv.signature,
        }


def metadata_of(db: Database, tenant: Tenant, name: str, version: str | None) -> dict[str, Any]:
    d = _resolve(db, tenant, name, version)
    return {
        "name": name,
        "versions": d["versions"] if version is None else [d["version"]],
        # Triton names the backend that serves the model (onnxruntime_onnx, tensorrt_plan): here, what it is
        # compiled for.
        "platform": f"luminal_{d['gpu_type']}",
        "inputs": [s.model_dump() for s in tensor_specs(d["signature"]["inputs"])] + _text_input(d["signature"]),
        "outputs": [s.model_dump() for s in tensor_specs(d["signature"]["outputs"])],
    }


def _text_input(signature: dict[str, Any]) -> list[dict[str, Any]]:
    """An embedding model also takes text (tokenized on the gateway): the BYTES input Triton's clients send."""
    if signature.get("kind") != EMBEDDING_KIND:
        return []
    return [{"name": TEXT_INPUT, "datatype": "BYTES", "shape": [-1, 1]}]


def _ready(platform: Platform, tenant: Tenant, name: str, version: str | None) -> dict[str, Any]:
    why_not = unready_reason(platform, tenant, name, version)
    if why_not is not None:
        raise ApiError(400, why_not)
    return {"name": name, "ready": True}


def unready_reason(platform: Platform, tenant: Tenant, name: str, version: str | None) -> str | None:
    """Why the model cannot serve now, or None when it can (a missing model raises NotFound). Reads the database.
    Without a version, a model with a traffic split can serve when one of the versions that split serves can."""
    split = None if version is not None else read_ready_split(platform.db, tenant, name).weights
    if split is not None:
        reasons = [unready_reason(platform, tenant, name, str(v)) for v, _ in split]
        return None if None in reasons else "; ".join(reasons) or no_ready_version(name)
    d = _resolve(platform.db, tenant, name, version)
    if d["status"] != deployment_store.READY:
        return _not_ready_message(name, d)
    refusal = platform.unschedulable(d["gpu_type"])
    if refusal is not None:  # compiled, but no worker will ever take its requests: not ready to serve
        return f"model {name!r} version {d['version']} is not ready (unschedulable): {refusal}"
    return None


def _not_ready_message(name: str, d: dict[str, Any]) -> str:
    if d["status"] == deployment_store.FAILED:
        return f"model {name!r} version {d['version']} failed to compile: {d['error']}"
    return f"model {name!r} version {d['version']} is not ready ({d['status']})"


async def resolve_ready(platform: Platform, tenant: Tenant, name: str, version: str | None) -> dict[str, Any]:
    """The deployment serving `name` (at `version`), refused with 400 unless it is ready. Ready deployments
    come from the platform's short-lived cache; anything else is read fresh every time. Without a version, the
    model's traffic split picks one (when it has a split)."""
    if version is None:
        version = await routed_version(platform, tenant, name)
    key = (tenant.id, name, version)
    d = platform.ready_deployments.get(key)
    if d is not None:
        return d
    generation = platform.ready_deployments.generation()
    d = await run_in_threadpool(_resolve, platform.db, tenant, name, version)
    if d["status"] != deployment_store.READY:
        raise ApiError(400, _not_ready_message(name, d))
    platform.ready_deployments.put(key, d, generation)
    return d


@dataclass(frozen=True)
class PreparedInference:
    """A checked request for a ready deployment: what both the synchronous and the asynchronous paths run."""

    name: str
    deployment: dict[str, Any]
    labels: ModelLabels
    parsed: InferRequest
    ref: DeploymentRef
    request: InferenceRequest

    def prediction_job(
        self, webhook_url: str | None = None, webhook_events: frozenset[str] = DEFAULT_EVENTS
    ) -> PredictionJob:
        d = self.deployment
        return PredictionJob(
            self.ref,
            self.labels,
            self.request,
            self.parsed,
            self.name,
            d["version"],
            d["signature"],
            webhook_url,
            webhook_events,
        )


async def prepare(
    metrics: InferenceMetrics, tenant: Tenant, name: str, d: dict[str, Any], body: bytes, header_length: str | None
) -> PreparedInference:
    """Decode the body against the deployment's signature; a bad one is counted as an invalid request."""
    decode = partial(parse_infer_request, body, header_length, d["signature"])
    return await prepare_decoded(metrics, tenant, name, d, decode, inline=len(body) <= INLINE_PARSE_BYTES)


async def prepare_decoded(
    metrics: InferenceMetrics,
    tenant: Tenant,
    name: str,
    d: dict[str, Any],
    decode: Callable[[], InferRequest],
    inline: bool,
) -> PreparedInference:
    """`prepare` for any protocol's request: `decode` checks it against `d`'s signature (raising TensorError), on
    the event loop when `inline` (a small request: cheaper than a thread hop), else in a worker thread."""
    labels = ModelLabels.of(name, d["version"], d["id"])
    if d["signature"].get("kind") == LLM_KIND:  # its program is an .llmprog that only the generation engine runs
        raise ApiError(400, f"model {name!r} is a language model: call /openai/v1/completions or chat/completions")
    try:
        parsed = decode() if inline else await run_in_threadpool(decode)
    except TensorError as e:
        metrics.record_failure(labels, 400, str(e))
        raise
    ref = deployment_ref(tenant, d)
    return PreparedInference(name, d, labels, parsed, ref, _queued_request(ref, parsed))


def deployment_ref(tenant: Tenant, d: dict[str, Any]) -> DeploymentRef:
    """What the backend needs of a resolved deployment `d`."""
    return DeploymentRef(
        deployment_id=d["id"],
        tenant_id=tenant.id,
        program_key=d["program_key"],
        gpu_type=d["gpu_type"],
        max_batch_size=d["max_batch_size"],
        max_queue_delay_ms=d["max_queue_delay_ms"],
    )


async def answer_inference(request: Request, name: str, version: str | None, tenant: Tenant | None) -> Response:
    """The answer of an infer route (also given, without FastAPI's routing, by gateway/infer_fast_path.py).
    `tenant` None: the caller's key and standing are checked here, within the admission stage of its trace."""
    platform: Platform = request.app.state.platform
    with tracing.stage(ADMISSION):
        if tenant is None:
            tenant = await tenant_of(request)
        d = await resolve_ready(platform, tenant, name, version)
        try:
            body = await read_capped_body(request, platform.settings.max_request_bytes)
        except ApiError as e:
            platform.metrics.record_failure(ModelLabels.of(name, d["version"], d["id"]), e.status, e.message)
            raise
        header_length = request.headers.get(HEADER_LENGTH)
        text = d["signature"].get("kind") == EMBEDDING_KIND and is_text_request(body, header_length)
        prepared = None if text else await prepare(platform.metrics, tenant, name, d, body, header_length)
    if prepared is None:
        return await answer_text_inference(platform, deployment_ref(tenant, d), name, d, body, header_length)
    if prefers_async(request.headers.getlist("prefer")):  # answer 202 now; the result is polled or pushed
        prediction_id = await platform.predictions.submit(prepared.prediction_job(), tenant.id)
        return accepted_response(prediction_id, preference_applied=True)
    result = await run_prepared(platform, prepared)
    parsed = prepared.parsed
    with tracing.stage(ANSWER):
        payload, json_length = encode_infer_response(name, d["version"], parsed, result.outputs, d["signature"])
    headers = {HEADER_REQUEST_ID: result.request_id}
    if json_length is None:
        return Response(payload, media_type="application/json", headers=headers)
    headers[HEADER_LENGTH] = str(json_length)
    return Response(payload, media_type="application/octet-stream", headers=headers)


async def run_prepared(platform: Platform, prepared: PreparedInference) -> InferenceResult:
    """Admit, queue, batch, execute and bill a prepared request, counted in the metrics: the one path every
    protocol's synchronous inference takes. A failure raises ApiError with the backend's status."""
    ref = prepared.ref
    result = await observed_infer(platform.metrics, prepared.labels, platform.backend, ref, prepared.request)
    if not result.ok:
        raise ApiError(result.status, result.error or "inference failed")
    missing = [n for n in prepared.parsed.outputs if n not in result.outputs]
    if missing:  # a backend bug, never the caller's: a 500, logged with the names
        raise RuntimeError(f"deployment {ref.deployment_id}: the backend returned no output(s) {missing}")
    return result


def _queued_request(ref: DeploymentRef, parsed: InferRequest) -> InferenceRequest:
    now = time.time()
    deadline = None if parsed.timeout_us is None else now + parsed.timeout_us / 1e6
    return InferenceRequest(
        deployment_id=ref.deployment_id,
        tenant_id=ref.tenant_id,
        inputs=parsed.inputs,
        priority=effective_priority(parsed.priority),
        deadline=deadline,
        enqueued_at=now,
    )


# These routes answer only what gateway/infer_fast_path.py passes on (a name too long, a mounted app) and document
# the API. They take only the tenant as a dependency and come first (and this router first in the app): a request
# is matched against the routes in order.
@router.post("/{name}/infer")
async def infer(request: Request, name: ModelNameInPath, tenant: TenantDep) -> Response:
    """JSON tensors, or JSON followed by binary tensors (Triton's extension); see gateway/tensor_codec.py. With
    `Prefer: respond-async`: 202 and a prediction to poll at /v1/predictions/{id} (gateway/predictions.py)."""
    return await answer_inference(request, name, None, tenant)


@router.post("/{name}/versions/{version}/infer")
async def infer_version(request: Request, name: ModelNameInPath, version: str, tenant: TenantDep) -> Response:
    return await answer_inference(request, name, version, tenant)


@router.get("/{name}")
def model_metadata(name: ModelNameInPath, tenant: TenantDep, db: DatabaseDep) -> dict[str, Any]:
    return metadata_of(db, tenant, name, None)


@router.get("/{name}/versions/{version}")
def model_version_metadata(name: ModelNameInPath, version: str, tenant: TenantDep, db: DatabaseDep) -> dict[str, Any]:
    return metadata_of(db, tenant, name, version)


@router.get("/{name}/ready")
def model_ready(name: ModelNameInPath, tenant: TenantDep, platform: PlatformDep) -> dict[str, Any]:
    return _ready(platform, tenant, name, None)


@router.get("/{name}/versions/{version}/ready")
def model_version_ready(
    name: ModelNameInPath, version: str, tenant: TenantDep, platform: PlatformDep
) -> dict[str, Any]:
    return _ready(platform, tenant, name, version)
