"""OIP server endpoints: liveness, readiness and server metadata. No key is needed, so load balancers and
Kubernetes probes can call them."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import DatabaseDep
from luminal.gateway.errors import ApiError
from luminal.store.database import Database

router = APIRouter(prefix="/v2", tags=["inference"])
SERVER_NAME = "luminal"
SERVER_VERSION = "0.1.0"
# Triton's binary tensor extension is the one a tritonclient or perf_analyzer needs from us.
EXTENSIONS = ["binary_tensor_data"]


@router.get("/health/live")
def live() -> dict[str, bool]:
    return {"live": True}


@router.get("/health/ready")
async def ready(db: DatabaseDep) -> dict[str, bool]:
    """Ready when the metadata database answers (every model request needs it)."""
    problem = await unready_database(db)
    if problem is not None:
        raise ApiError(503, problem)
    return {"ready": True}


async def unready_database(db: Database) -> str | None:
    """What keeps the server from being ready (the metadata database unreachable), or None when it is ready."""

    def ping() -> None:
        with db.session() as session:
            session.execute(text("SELECT 1"))

    try:
        await run_in_threadpool(ping)
    except Exception as e:  # any database failure means not ready; the probe wants a status, not a trace
        return f"the metadata database is unreachable: {type(e).__name__}"
    return None


@router.get("")
def server_metadata() -> dict[str, object]:
    return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS}
