"""The infer routes without FastAPI's routing and dependency machinery: the hot path of every model.

FastAPI matches a request against its routes, builds the endpoint's parameters through its dependency solver
and wraps the response in two exception layers: 0.15 to 0.2 ms of the event loop's CPU per request on the test
machine, a fifth of the loop's work for a request. This middleware answers `POST
/v2/models/{name}[/versions/{version}]/infer` itself with the same functions the routes call (`tenant_of`,
`answer_inference`) and the app's own exception handlers, so the answers are the routes' answers. Anything it does not
recognise, including a name the route would refuse as too long, goes on to FastAPI, which judges it as before.
The routes stay declared: they document the API (OpenAPI) and answer what this passes on.

Each request's trace starts here (scheduler/tracing.py): its server span, child of the caller's `traceparent`,
covers the whole answer, sending included; the routes' rare answers are not traced.
"""

from __future__ import annotations

import inspect
import re

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from luminal.gateway.routers.inference import answer_inference
from luminal.gateway.schemas import MAX_MODEL_NAME_CHARS
from luminal.scheduler import tracing

# What the routes match: Starlette's `{name}` is one path segment, of at least one character.
_INFER_PATH = re.compile(r"/v2/models/([^/]+)/(?:versions/([^/]+)/)?infer")
# The routes as OpenAPI names them: a trace's server span is named by its route, never by the model's name.
ROUTE, VERSION_ROUTE = "/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"


class InferFastPath:
    def __init__(self, app: ASGIApp):
        self.app = app  # the rest of the FastAPI stack

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = None
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            match = _INFER_PATH.fullmatch(scope["path"])
        if match is None or len(match.group(1)) > MAX_MODEL_NAME_CHARS:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)  # scope["app"] is the FastAPI app: Starlette set it
        route = ROUTE if match.group(2) is None else VERSION_ROUTE
        attributes = {"http.request.method": "POST", "http.route": route, "luminal.model.name": match.group(1)}
        with tracing.server_span(f"POST {route}", request.headers, attributes):
            try:
                response = await answer_inference(request, match.group(1), match.group(2), None)
            except Exception as exc:
                response = await _handled(request, exc)
            tracing.http_answered(response.status_code)
            await response(scope, receive, send)


async def _handled(request: Request, exc: Exception) -> Response:
    """The response the app's exception handler for `exc` gives, as Starlette's ExceptionMiddleware would pick
    it (the nearest class in its MRO). Errors without one are re-raised to ServerErrorMiddleware, which answers
    them with the app's 500 handler, as it does for every route."""
    handlers = request.app.exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            break
        handler = handlers.get(cls)
        if handler is not None:
            response = handler(request, exc)
            return await response if inspect.isawaitable(response) else response
    tracing.http_answered(500)  # what ServerErrorMiddleware will answer
    raise exc
