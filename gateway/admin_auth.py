"""The admin API's credential: `Authorization: Bearer <LUMINAL_ADMIN_TOKEN>`. Unset, the admin API is disabled.

A tenant's API key never opens it, however valid: the admin API acts on every tenant."""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Depends, Request

from luminal.gateway.bearer import bearer_credential
from luminal.gateway.dependencies import PlatformDep
from luminal.gateway.errors import ApiError
from luminal.store.tenants import KEY_PREFIX

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="admin"'}
MAX_TOKEN_CHARS = 1024  # refuse to hash anything absurd


def _same_secret(given: str, secret: str) -> bool:
    # Digests compared in constant time: neither how much of a guess was right nor the token's length shows
    # in the comparison's duration.
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), hashlib.sha256(secret.encode()).digest())


async def _require_admin(request: Request, p: PlatformDep) -> None:
    token = p.settings.admin_token
    if token is None:
        raise ApiError(
            404, "the admin API is disabled on this gateway: set LUMINAL_ADMIN_TOKEN (16 or more characters)"
        )
    given = bearer_credential(request, "admin token", MAX_TOKEN_CHARS, _CHALLENGE)
    if _same_secret(given, token):
        return
    if given.startswith(KEY_PREFIX):
        raise ApiError(403, "a tenant's API key cannot call the admin API: it takes the admin token")
    raise ApiError(401, "wrong admin token", _CHALLENGE)


# `dependencies=[AdminOnly]` on the admin router: every route under it requires the admin token.
AdminOnly = Depends(_require_admin)
