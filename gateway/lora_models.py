"""LoRA adapters as OpenAI models: a language-model version whose package carries LoRA stacks records its layout
and its adapters' names in its signature (uploads.py); each adapter is listed in `/openai/v1/models` (with its base
as "parent", as vLLM lists them) and called by its name in `model`, which the gateway resolves to its base's
deployment and the sequence's `SamplingParams.lora`."""

from __future__ import annotations

from typing import Any

from luminal.lora_package import lora_shapes
from luminal.store import deployments as deployment_store
from luminal.store.database import Database
from luminal.store.tables import Tenant


def lora_signature(package: Any) -> dict[str, Any]:
    """What a version's signature says of its package's LoRA ({} without): the layout and the adapters packed."""
    if package.lora is None:
        return {}
    shapes = lora_shapes(package.paged if package.paged is not None else package.graphs.step)
    facts = {"adapters": sorted(package.adapters), "shapes": {p: list(s) for p, s in shapes.items()}}
    return {"lora": {**package.lora.to_json(), **facts, "base": package.config.get("_name_or_path", "")}}


def adapters_of(signature: dict[str, Any]) -> list[str]:
    lora = signature.get("lora") or {}
    return list(lora.get("adapters", []))


def ready_adapters(db: Database, tenant: Tenant) -> dict[str, tuple[str, int]]:
    """{adapter name: (base model name, deployment created at)} over the tenant's ready deployments; an adapter
    name held by two deployments goes to the first created (names are the tenant's, as model names are)."""
    found: dict[str, tuple[str, int]] = {}
    with db.session() as session:
        for d in deployment_store.list_deployments(session, tenant):
            version = d.model_version
            if d.status != deployment_store.READY:
                continue
            for adapter in adapters_of(version.signature):
                found.setdefault(adapter, (version.model.name, int(d.created_at.timestamp())))
            for row in d.lora_adapters:  # added live (store/lora_adapters.py)
                found.setdefault(row.name, (version.model.name, int(row.created_at.timestamp())))
    return found


def base_of(db: Database, tenant: Tenant, adapter: str) -> str | None:
    """The model name of the deployment serving LoRA adapter `adapter`, or None when none does."""
    hit = ready_adapters(db, tenant).get(adapter)
    return None if hit is None else hit[0]
