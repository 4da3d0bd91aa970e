"""Errors of the OpenAI-compatible API in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`,
which the `openai` client turns into its typed exceptions (BadRequestError, AuthenticationError, ...).

`OpenAIRoute` is the route class of those routers: whatever the platform raises while a request is checked,
authenticated or answered (its ApiError, a store's NotFound, a full queue) leaves in this shape, while the rest
of the gateway keeps the Open Inference Protocol's `{"error": "..."}`. It also notes each request's arrival
(`arrival_of`), before authentication and the body are read, which a sequence's waiting deadline counts from.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from luminal.compiler.storage.artifact_json import ArtifactError
from luminal.gateway.errors import ApiError
from luminal.gateway.metrics import ModelLabels
from luminal.scheduler import tracing
from luminal.scheduler.generation.chat_template import ChatTemplateError
from luminal.scheduler.generation.engine import EngineBusy, PromptTooLong
from luminal.scheduler.generation.grammar import GrammarError
from luminal.scheduler.queues.base import QueueFull
from luminal.store.errors import NotFound, QuotaExceeded

log = logging.getLogger(__name__)
TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


class OpenAIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None, headers=None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers

    def body(self) -> dict[str, Any]:
        kind = TYPES.get(self.status, "server_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _validation(e: RequestValidationError) -> OpenAIError:
    first = e.errors()[0] if e.errors() else {}
    param = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
    message = f"{param}: {first.get('msg', 'invalid')}" if param else str(first.get("msg", "invalid request"))
    return OpenAIError(400, message, param)


def as_openai_error(e: Exception) -> OpenAIError | None:
    """The OpenAI error for an exception the platform raises on a caller's account (None: our bug)."""
    if isinstance(e, OpenAIError):
        return e
    if isinstance(e, ApiError):
        code = "invalid_api_key" if e.status == 401 else None
        return OpenAIError(e.status, e.message, None, code, e.headers)
    if isinstance(e, NotFound):
        return OpenAIError(404, str(e), "model", "model_not_found")
    if isinstance(e, RequestValidationError):
        return _validation(e)
    if isinstance(e, PromptTooLong):
        return OpenAIError(400, str(e), "messages", "context_length_exceeded")
    if isinstance(e, GrammarError):
        return OpenAIError(400, f"response_format: {e}", "response_format")
    if isinstance(e, ChatTemplateError):
        return OpenAIError(400, str(e), "messages")
    if isinstance(e, EngineBusy | QuotaExceeded | QueueFull):
        retry = str(max(1, math.ceil(getattr(e, "retry_after_s", 1))))
        return OpenAIError(429, str(e), None, None, {"Retry-After": retry})
    if isinstance(e, HTTPException):
        return OpenAIError(e.status_code, str(e.detail))
    if isinstance(e, ArtifactError):  # e.g. compiled by an earlier compiler: the deployment must be recompiled
        return OpenAIError(503, f"the model's compiled program cannot be loaded: {e}", "model")
    return None


def note_model(request: Request, labels: ModelLabels) -> None:
    """Name the deployment the request is for: an error raised from here on, before the answer starts, is kept
    among that deployment's recent failures (the dashboard lists them)."""
    request.state.model_labels = labels


def arrival_of(request: Request) -> float:
    """When the request reached its route (time.perf_counter): its waiting deadline and time to first token
    count from there."""
    return getattr(request.state, "arrived", None) or time.perf_counter()


class OpenAIRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            request.state.arrived = time.perf_counter()
            # A streamed answer's span ends as its response starts; the worker's sequence span covers the rest.
            route = _route_of(request.url.path, self.path_format) if tracing.enabled() else ""
            attributes = {"http.request.method": request.method, "http.route": route}
            with tracing.server_span(f"{request.method} {route}", request.headers, attributes):
                response = await _answered(request)
                tracing.http_answered(response.status_code)
                return response

        async def _answered(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as e:
                error = as_openai_error(e)
                if error is None:
                    log.error("unhandled error", exc_info=e)
                    error = OpenAIError(500, "internal error")
                labels = getattr(request.state, "model_labels", None)
                if labels is not None:
                    request.app.state.platform.metrics.note_failure(labels, error.status, error.message)
                return error.response()

        return answer


def _route_of(path: str, path_format: str) -> str:
    """The full route of a request to `path_format` (a route of an included router, which knows it without the
    prefixes it is mounted under): the path's own leading segments, then the route's, so a trace names the route,
    never a model."""
    kept = path.rstrip("/").count("/") - path_format.rstrip("/").count("/")
    return "/".join(path.split("/")[: kept + 1]) + path_format
