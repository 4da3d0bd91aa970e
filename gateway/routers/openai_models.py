"""`GET /openai/v1/models`: the caller's ready language-model and embedding deployments, as OpenAI lists models."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import DatabaseDep, TenantDep
from luminal.gateway.lora_models import ready_adapters
from luminal.gateway.openai_errors import OpenAIRoute
from luminal.gateway.uploads import EMBEDDING_KIND, LLM_KIND
from luminal.store import deployments as deployment_store
from luminal.store.database import Database
from luminal.store.tables import Tenant

router = APIRouter(route_class=OpenAIRoute)
OPENAI_KINDS = (LLM_KIND, EMBEDDING_KIND)  # what the OpenAI-compatible routes serve (other models: /v2/models)


def _models(db: Database, tenant: Tenant) -> list[dict[str, Any]]:
    with db.session() as session:
        rows = deployment_store.list_deployments(session, tenant)
        names = {}
        for d in rows:
            version = d.model_version
            if d.status == deployment_store.READY and version.signature.get("kind") in OPENAI_KINDS:
                names.setdefault(version.model.name, int(d.created_at.timestamp()))
        listed = [{"id": n, "object": "model", "created": c, "owned_by": tenant.name} for n, c in sorted(names.items())]
    adapters = ready_adapters(db, tenant)
    listed += [
        {"id": a, "object": "model", "created": c, "owned_by": tenant.name, "parent": base}
        for a, (base, c) in sorted(adapters.items())
        if a not in names  # a model of that name is called by it
    ]
    return listed


@router.get("/models")
async def list_models(tenant: TenantDep, db: DatabaseDep) -> dict[str, Any]:
    return {"object": "list", "data": await run_in_threadpool(_models, db, tenant)}
