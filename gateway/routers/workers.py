"""`/v1/deployments/{id}/workers`: the deployment's replicas as the provisioner sees them (running, ready, the
recent cold-start times, why it can have none when its GPU type is not provided) and the worker registry's records
(host, pid, the device type each runs on, heartbeats), and for a language model's workers the load each last
reported (running and waiting sequences, free KV cache blocks, the prompt prefixes its cache holds and the prompt
tokens it found there instead of prefilling them, the LoRA adapters its engine serves, its free adapter slots
and the posted adapters it could not load, with why)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from luminal.gateway.dependencies import DatabaseDep, PlatformDep, TenantDep
from luminal.gateway.schemas import RowId
from luminal.scheduler.sequences.request import WorkerLoad
from luminal.store import deployments as deployment_store

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])


@router.get("/{deployment_id}/workers")
def deployment_workers(
    deployment_id: RowId, tenant: TenantDep, db: DatabaseDep, platform: PlatformDep
) -> dict[str, Any]:
    with db.session() as session:
        gpu_type = deployment_store.get_deployment(session, tenant, deployment_id).gpu_type  # 404: another's id
    if platform.provisioner is None:  # a backend without workers (the direct anchor of bench/serve.py)
        return {"unschedulable": None, "replicas": 0, "ready_replicas": 0, "cold_start_seconds": [], "workers": []}
    status = platform.provisioner.status(deployment_id, gpu_type)
    loads = platform.sequences.loads(deployment_id) if platform.sequences is not None else {}
    workers = [
        {
            "worker_id": w.worker_id,
            "host": w.host,
            "pid": w.pid,
            "device": w.device,
            "started_at": w.started_at,
            "ready_at": w.ready_at,
            "last_heartbeat": w.last_heartbeat,
            **({"sequences": _load(loads[w.worker_id])} if w.worker_id in loads else {}),
        }
        for w in platform.registry.workers(deployment_id)
    ]
    return {**status, "workers": workers}


def _load(load: WorkerLoad) -> dict[str, Any]:
    return {"running": load.running, "waiting": load.waiting, "kv_blocks_free": load.kv_blocks_free,
            "cached_prefixes": len(load.prefixes), "reused_prompt_tokens": load.reused_tokens,
            "lora_adapters": [name for name, _ in load.adapters], "lora_slots_free": load.adapter_slots_free,
            "lora_errors": dict(load.adapter_errors), "reported_at": load.reported_at}  # fmt: skip
