"""The credential of an `Authorization: Bearer <credential>` header, or a 401 that says what is wrong with it
(shared by the tenant's API key and the operator's metrics token)."""

from __future__ import annotations

from fastapi import Request

from luminal.gateway.errors import ApiError


def bearer_credential(request: Request, what: str, max_chars: int, challenge: dict[str, str]) -> str:
    """`what` names the credential in the messages ("api key"); longer than `max_chars` is refused unread."""
    return credential_of(request.headers.get("authorization"), what, max_chars, challenge)


def credential_of(header: str | None, what: str, max_chars: int, challenge: dict[str, str]) -> str:
    """The same from the header's value, wherever it came from (HTTP headers, gRPC metadata)."""
    if header is None:
        raise ApiError(401, f"missing Authorization header (expected 'Bearer <{what}>')", challenge)
    scheme, _, credential = header.partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential or len(credential) > max_chars:
        raise ApiError(401, f"malformed Authorization header (expected 'Bearer <{what}>')", challenge)
    return credential
