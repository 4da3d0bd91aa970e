"""The dashboard: its page at `/dashboard` (static files, no key needed to load them) and the tenant-scoped
JSON it draws from, `/v1/dashboard/summary` and `/v1/dashboard/deployments/{id}/series` (the caller's key,
sent by the page as `Authorization: Bearer`).

Query parameters arrive as text and are parsed here, so a bad one is a 400 naming it."""

from __future__ import annotations

import time
from dataclasses import asdict
from importlib.resources import files
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse
from starlette.staticfiles import StaticFiles

from luminal.gateway.dashboard import summary
from luminal.gateway.dependencies import DatabaseDep, PlatformDep, TenantDep
from luminal.gateway.routers.usage import parse_int, written_so_far
from luminal.gateway.schemas import RowId
from luminal.store import deployments as deployment_store

router = APIRouter(tags=["dashboard"])
STATIC = files("luminal.gateway.dashboard") / "static"
MAX_DAYS = 366
MAX_FAILURES = 500
MAX_WINDOW_S = 7 * 86_400
# The page loads only its own script and style sheet and talks only to this gateway: the browser enforces that, so
# nothing injected into it (a model name, an error message) could load or send anything elsewhere.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",  # a new gateway version's page is fetched, not an old one from the cache
}


def static_files() -> StaticFiles:
    """The page's script and style sheet, mounted at /dashboard/static (gateway/app.py)."""
    return StaticFiles(directory=str(STATIC))


@router.get("/dashboard", include_in_schema=False)
def dashboard_page() -> FileResponse:
    return FileResponse(str(STATIC / "index.html"), media_type="text/html", headers=PAGE_HEADERS)


@router.get("/dashboard/", include_in_schema=False)
def dashboard_slash() -> RedirectResponse:
    return RedirectResponse("/dashboard")


@router.get("/v1/dashboard/summary")
def dashboard_summary(
    tenant: TenantDep, platform: PlatformDep, days: str | None = None, failures: str | None = None
) -> dict[str, Any]:
    """The caller's deployments (status, version, GPU, replicas ready and starting, cold starts, traffic share),
    usage and cost per UTC day for the last `days` (1 to 366, default 14), and its deployments' newest
    `failures` failed requests seen by this gateway (1 to 500, default 50)."""
    day_count = parse_int("days", days, 14, 1, MAX_DAYS)
    failure_count = parse_int("failures", failures, 50, 1, MAX_FAILURES)
    written_so_far(platform)
    deployments = summary.deployments_of(platform, tenant)
    ids = [d["id"] for d in deployments]
    return {
        "deployments": deployments,
        "usage_by_day": summary.usage_by_day(platform, tenant, day_count),
        "failures": summary.recent_failures(platform, ids, failure_count),
        "sample_interval_s": platform.settings.dashboard_sample_s,
    }


@router.get("/v1/dashboard/deployments/{deployment_id}/series")
def dashboard_series(
    deployment_id: RowId, tenant: TenantDep, db: DatabaseDep, platform: PlatformDep, window: str | None = None
) -> dict[str, Any]:
    """The deployment's metrics over the last `window` seconds (10 to 604800, default 900), one point per
    sampling interval: requests and errors, latency percentiles, pending requests, and for a language model
    tokens/s and time to first token. Kept in this gateway's memory, at most `dashboard_points` points."""
    seconds = parse_int("window", window, 900, 10, MAX_WINDOW_S)
    with db.session() as session:
        deployment_store.get_deployment(session, tenant, deployment_id)  # 404: another tenant's, or none
    points = platform.dashboard_sampler.series(deployment_id, time.time() - seconds)
    return {
        "deployment_id": deployment_id,
        "interval_s": platform.settings.dashboard_sample_s,
        "points": [asdict(p) for p in points],
    }
