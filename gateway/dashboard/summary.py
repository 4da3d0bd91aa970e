"""What the dashboard's summary shows a tenant: its deployments with their replicas and cold starts, each
model's traffic split, billed usage and cost per day, and its deployments' recent failures. Read from the
metadata and usage stores, the provisioner and the gateway's failure log; only the tenant's own rows."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from luminal.gateway.platform import Platform
from luminal.gateway.schemas import DeploymentPublic
from luminal.gateway.uploads import LLM_KIND
from luminal.store import deployments as deployment_store
from luminal.store import traffic as traffic_store
from luminal.store import usage as usage_store
from luminal.store.tables import Tenant

DAY_S = 86_400


def deployments_of(platform: Platform, tenant: Tenant) -> list[dict[str, Any]]:
    """The tenant's deployments, each with its replicas as the provisioner sees them and its model's split."""
    with platform.db.session() as session:
        rows = deployment_store.list_deployments(session, tenant)
        public = [(DeploymentPublic.of(r, platform.unschedulable(r.gpu_type)), _kind(r)) for r in rows]
        splits = {name: traffic_store.current_split(session, tenant, name) for name in {p.model for p, _ in public}}
    return [
        {
            **d.model_dump(mode="json", include={"id", "model", "version", "gpu_type", "status", "error"}),
            "kind": kind,
            "min_replicas": d.min_replicas,
            "max_replicas": d.max_replicas,
            **_replicas(platform, d.id),
            # The percent of the model's unversioned traffic this version takes; None when the model has no split.
            "traffic_percent": None if splits[d.model] is None else splits[d.model].get(d.version, 0),
        }
        for d, kind in public
    ]


def _kind(row) -> str:
    return "llm" if row.model_version.signature.get("kind") == LLM_KIND else "tensor"


def _replicas(platform: Platform, deployment_id: int) -> dict[str, Any]:
    if platform.provisioner is None:  # a backend without workers: nothing to count
        return {"replicas": 0, "ready_replicas": 0, "starting_replicas": 0, "cold_start_seconds": []}
    status = platform.provisioner.status(deployment_id)
    starting = status["replicas"] - status["ready_replicas"]
    return {**status, "starting_replicas": starting}


def usage_by_day(platform: Platform, tenant: Tenant, days: int) -> list[dict[str, Any]]:
    """Billed requests, GPU-seconds and cost per UTC day, the last `days` days (today included), oldest first;
    days without usage are listed with zeros so a chart's bars line up with the calendar."""
    today = int(time.time()) // DAY_S * DAY_S
    since = today - (days - 1) * DAY_S
    with platform.db.session() as session:
        lines = usage_store.usage_lines(session, tenant.id, since, today + DAY_S, DAY_S)
    by_day = {since + i * DAY_S: {"requests": 0, "gpu_seconds": 0.0, "cost": 0.0} for i in range(days)}
    for line in lines:
        day = by_day[line.period_start]
        day["requests"] += line.requests
        day["gpu_seconds"] += line.gpu_seconds
        day["cost"] += line.cost
    return [{"day": time.strftime("%Y-%m-%d", time.gmtime(start)), **sums} for start, sums in by_day.items()]


def recent_failures(platform: Platform, deployment_ids: list[int], limit: int) -> list[dict[str, Any]]:
    return [asdict(f) for f in platform.metrics.failures.recent(deployment_ids, limit)]
