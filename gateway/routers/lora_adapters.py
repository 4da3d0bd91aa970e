"""`/v1/deployments/{id}/adapters`: LoRA adapters of a live language-model deployment. Adding one checks it
against the deployment's LoRA stacks (rank, targets, base, finite factors; refused 400 naming why) and its free
slots (409), stores its factors as an artifact, and posts it on the deployment's board, which every running worker
(thread or process) reads between rounds and loads it from (scheduler/live_adapters.py): no recompile, no restart,
the running batch goes on. Removing one refuses its name at once at the API and posts its removal: each worker
refuses it to new sequences, lets the sequences already using it finish with it, then frees its slot. Workers
started later read the deployment's adapters from their spec (scheduler/worker_spec.py)."""

from __future__ import annotations

import base64
import binascii
import json
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import ArtifactsDep, ChangesMetadata, DatabaseDep, PlatformDep, TenantDep
from luminal.gateway.errors import ApiError
from luminal.gateway.lora_models import adapters_of
from luminal.gateway.platform import Platform
from luminal.gateway.request_body import read_json_model
from luminal.gateway.schemas import RowId
from luminal.lora_adapter import CONFIG, WEIGHTS, LoraAdapter, LoraRefused, check_adapter, load_adapter
from luminal.lora_package import check_adapter_name, encode_adapters
from luminal.nn.lora import LoraLayout
from luminal.scheduler.live_adapters import check_factors
from luminal.store import deployments as deployment_store
from luminal.store import lora_adapters as adapter_store
from luminal.store.tables import Tenant

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])
# An adapter's factors travel base64 in JSON: rank-64 adapters of 8B models are ~170 MB, far under this.
MAX_BODY_BYTES = 1 << 30


class LoraAdapterCreate(BaseModel):
    """A PEFT folder's two files: adapter_config.json's object and adapter_model.safetensors in base64."""

    name: str = Field(max_length=64)
    config: dict[str, Any]
    weights_base64: str


class LoraAdapterPublic(BaseModel):
    name: str
    deployment_id: int
    added_live: bool  # False: packed with the model at deploy time (removed only by redeploying)


@router.get("/{deployment_id}/adapters")
def list_adapters(deployment_id: RowId, tenant: TenantDep, db: DatabaseDep) -> list[LoraAdapterPublic]:
    with db.session() as session:
        row = deployment_store.get_deployment(session, tenant, deployment_id)
        packed = [LoraAdapterPublic(name=n, deployment_id=row.id, added_live=False)
                  for n in adapters_of(row.model_version.signature)]  # fmt: skip
        live = [LoraAdapterPublic(name=a.name, deployment_id=row.id, added_live=True) for a in row.lora_adapters]
        return packed + live


@router.post("/{deployment_id}/adapters", status_code=201, dependencies=[ChangesMetadata])
async def add_adapter(
    deployment_id: RowId, request: Request, tenant: TenantDep, db: DatabaseDep, artifacts: ArtifactsDep,
    platform: PlatformDep,
) -> LoraAdapterPublic:  # fmt: skip
    body = await read_json_model(request, LoraAdapterCreate, MAX_BODY_BYTES)
    return await run_in_threadpool(_add, platform, tenant, deployment_id, body, artifacts)


@router.delete("/{deployment_id}/adapters/{name}", status_code=204, dependencies=[ChangesMetadata])
def remove_adapter(
    deployment_id: RowId, name: str, tenant: TenantDep, db: DatabaseDep, artifacts: ArtifactsDep,
    platform: PlatformDep,
) -> Response:  # fmt: skip
    with db.session() as session:
        deployment_store.get_deployment(session, tenant, deployment_id)  # NotFound for another tenant's
        unused = adapter_store.remove_adapter(session, tenant, deployment_id, name)
    _post(platform, deployment_id, name, None)
    for key in unused:  # a worker that has not loaded it yet no longer will (a failed fetch is only logged)
        artifacts.delete(key)
    return Response(status_code=204)


def _add(platform: Platform, tenant: Tenant, deployment_id: int, body: LoraAdapterCreate, artifacts) -> Any:
    with platform.db.session() as session:
        row = deployment_store.get_deployment(session, tenant, deployment_id)
        lora, held = row.model_version.signature.get("lora"), len(adapters_of(row.model_version.signature))
        held += len(row.lora_adapters)
    if not lora:
        raise ApiError(400, f"deployment {deployment_id} was built without LoRA stacks: deploy it with --lora or "
                            "--lora-slots to add adapters")  # fmt: skip
    adapter = _checked(body, lora)
    if held >= int(lora["slots"]) - 1:  # slot 0 is the base's
        raise ApiError(409, f"deployment {deployment_id} serves {held} LoRA adapters, all of its "
                            f"{int(lora['slots']) - 1} slots: remove one first")  # fmt: skip
    key = artifacts.put_bytes(encode_adapters({body.name: adapter}))
    with platform.db.session() as session:
        adapter_store.add_adapter(session, tenant, deployment_id, body.name, key)
    _post(platform, deployment_id, body.name, key)
    return LoraAdapterPublic(name=body.name, deployment_id=deployment_id, added_live=True)


def _post(platform: Platform, deployment_id: int, name: str, key: str | None) -> None:
    """Tell the deployment's running workers (none where this gateway serves no language models)."""
    if platform.sequences is not None:
        platform.sequences.adapters.post(deployment_id, name, key)


def _checked(body: LoraAdapterCreate, lora: dict[str, Any]) -> LoraAdapter:
    """The adapter read as PEFT wrote it and checked against the deployment's stacks; 400 naming what is wrong."""
    try:
        check_adapter_name(body.name)
        weights = base64.b64decode(body.weights_base64, validate=True)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / CONFIG).write_text(json.dumps(body.config))
            (Path(tmp) / WEIGHTS).write_bytes(weights)
            adapter = load_adapter(Path(tmp))
        shapes = {path: (int(s[0]), int(s[1])) for path, s in lora["shapes"].items()}
        check_adapter(adapter, LoraLayout.from_json(lora), shapes, lora.get("base", ""))
        check_factors(adapter)
    except binascii.Error as e:
        raise ApiError(400, f"weights_base64 is not base64: {e}") from None
    except LoraRefused as e:
        raise ApiError(400, str(e)) from None
    except Exception as e:  # a malformed safetensors file: the library's own error
        raise ApiError(400, f"LoRA adapter: {WEIGHTS} does not read: {type(e).__name__}: {e}") from None
    return adapter
