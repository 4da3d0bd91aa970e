"""OIP server endpoints: liveness, readiness and server metadata. No key is needed, so load balancers and
Kubernetes probes can call them."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import DatabaseDep
from luminal.gateway.errors import ApiError

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

    def ping() -> None:
        with db.session() as session:
            session.execute(text("SELECT 1"))

    try:
        await run_in_threadpool(ping)
    except Exception as e:  # any database failure means not ready; the probe wants a status, not a trace
        raise ApiError(503, f"the metadata database is unreachable: {type(e).__name__}") from None
    return {"ready": True}


@router.get("")
def server_metadata() -> dict[str, object]:
    return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS}
