"""`GET /metrics`: the gateway's inference metrics for Prometheus (see gateway/metrics.py for the names).

An operator endpoint, not a tenant one: tenants' API keys do not open it. When `LUMINAL_METRICS_TOKEN` is set
it requires `Authorization: Bearer <that token>` (Prometheus' `authorization` scrape setting sends it); unset,
it is open, the embedded single-user default, where the gateway listens on the user's own machine. Set the token
wherever the gateway is reachable by others: the labels name every tenant's models.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request, Response

from luminal.gateway.bearer import bearer_credential
from luminal.gateway.dependencies import PlatformDep
from luminal.gateway.errors import ApiError
from luminal.gateway.metrics import CONTENT_TYPE

router = APIRouter(tags=["metrics"])
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="metrics"'}
MAX_TOKEN_CHARS = 1024  # refuse to compare anything absurd


def _check_token(request: Request, token: str) -> None:
    given = bearer_credential(request, "metrics token", MAX_TOKEN_CHARS, _CHALLENGE)
    # Constant-time: the comparison's duration must not tell how much of a guess was right.
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise ApiError(401, "wrong metrics token", _CHALLENGE)


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
def metrics(request: Request, platform: PlatformDep) -> Response:
    token = platform.settings.metrics_token
    if token is not None:
        _check_token(request, token)
    return Response(platform.metrics.exposition(), media_type=CONTENT_TYPE)
