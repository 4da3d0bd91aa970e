"""`/v1/predictions`: asynchronous inference. `POST` answers 202 with the prediction's id and URL; `GET` polls
one, or lists the tenant's newest. Another tenant's prediction is reported exactly like a missing one (404).
`POST /v2/models/{name}/infer` with `Prefer: respond-async` creates the same kind of prediction."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from luminal.gateway.dependencies import ArtifactsDep, DatabaseDep, PlatformDep, TenantDep
from luminal.gateway.errors import ApiError
from luminal.gateway.prediction_schemas import PredictionCreate, PredictionPage, PredictionPublic
from luminal.gateway.predictions import accepted_response, output_text
from luminal.gateway.request_body import read_json_model
from luminal.gateway.routers.inference import prepare, resolve_ready
from luminal.gateway.webhook_targets import check_target
from luminal.store import predictions as prediction_store

router = APIRouter(prefix="/v1/predictions", tags=["predictions"])
_BODY_DOC = {"content": {"application/json": {"schema": PredictionCreate.model_json_schema()}}, "required": True}
MAX_PAGE = 100
ID_PATTERN = r"^[0-9a-f]{32}$"  # what create_prediction issues; anything else cannot name a prediction


@router.post("", status_code=202, response_model=None, openapi_extra={"requestBody": _BODY_DOC})
async def create_prediction(
    request: Request, tenant: TenantDep, db: DatabaseDep, platform: PlatformDep
) -> JSONResponse:
    """202 with `{"id", "status": "queued", "url"}`; poll the URL, or pass `webhook` to have the prediction
    POSTed to you, signed, when it completes (and when it starts, with `webhook_events_filter`; see
    gateway/webhooks.py). A webhook at a loopback, private or otherwise internal address is refused (400)."""
    body = await read_json_model(request, PredictionCreate, platform.settings.max_request_bytes)
    try:
        webhook = body.checked_webhook()
        if webhook is not None:  # checked again at delivery, where the name may resolve elsewhere
            await anyio.to_thread.run_sync(check_target, webhook, platform.settings.webhook_allow_private)
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    version = None if body.version is None else str(body.version)
    d = await resolve_ready(platform, tenant, body.model, version)
    prepared = await prepare(platform.metrics, tenant, body.model, d, body.infer_body(), None)
    job = prepared.prediction_job(webhook, body.webhook_events())
    prediction_id = await platform.predictions.submit(job, tenant.id)
    return accepted_response(prediction_id)


@router.get("")
def list_predictions(
    tenant: TenantDep,
    db: DatabaseDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    before: Annotated[str | None, Query(pattern=ID_PATTERN, description="next_before of the previous page")] = None,
) -> PredictionPage:
    """The newest first, without outputs (GET one prediction for its output)."""
    with db.session() as session:
        rows = prediction_store.list_predictions(session, tenant, limit + 1, before)
        page = [PredictionPublic.of(row, None) for row in rows[:limit]]
    return PredictionPage(predictions=page, next_before=page[-1].id if len(rows) > limit else None)


@router.get("/{prediction_id}")
def get_prediction(prediction_id: str, tenant: TenantDep, db: DatabaseDep, artifacts: ArtifactsDep) -> PredictionPublic:
    with db.session() as session:
        row = prediction_store.get_prediction(session, tenant, prediction_id)
        return PredictionPublic.of(row, output_text(row, artifacts))
