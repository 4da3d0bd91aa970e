"""Every error leaves the gateway as `{"error": "<what is wrong>"}` with a 4xx (or a bare 500 for our bugs), the
shape the Open Inference Protocol prescribes, used by the management API too so clients parse one form."""

from __future__ import annotations

import logging
import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from luminal.gateway.tensor_codec import TensorError
from luminal.graph_json import GraphFileError
from luminal.scheduler.programs import InvalidInput
from luminal.scheduler.queues.base import QueueFull
from luminal.store.errors import Conflict, NotFound, QuotaExceeded

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid")))
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    statuses = {NotFound: 404, Conflict: 409, TensorError: 400, InvalidInput: 400}

    for exc_type, status in statuses.items():
        app.add_exception_handler(exc_type, lambda _r, e, status=status: error_response(status, str(e)))

    @app.exception_handler(GraphFileError)
    async def _graph_file(_r: Request, e: GraphFileError) -> JSONResponse:
        return error_response(400, f"invalid .lgraph file: {e}")

    @app.exception_handler(QueueFull)
    async def _queue_full(_r: Request, e: QueueFull) -> JSONResponse:
        return error_response(429, str(e), {"Retry-After": str(max(1, math.ceil(e.retry_after_s)))})

    @app.exception_handler(QuotaExceeded)
    async def _quota(_r: Request, e: QuotaExceeded) -> JSONResponse:
        return error_response(429, str(e), {"Retry-After": str(max(1, math.ceil(e.retry_after_s)))})

    @app.exception_handler(ApiError)
    async def _api(_r: Request, e: ApiError) -> JSONResponse:
        return error_response(e.status, e.message, e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_r: Request, e: StarletteHTTPException) -> JSONResponse:
        return error_response(e.status_code, str(e.detail), getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(_r: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(422, _validation_message(e))

    @app.exception_handler(Exception)
    async def _bug(_r: Request, e: Exception) -> JSONResponse:
        log.error("unhandled error", exc_info=e)
        return error_response(500, "internal error")
