"""How webhook deliveries are signed, two ways at once, both HMAC-SHA256 with the gateway's webhook secret:

- `Luminal-Signature: t=<unix seconds>,v1=<hex HMAC over "{t}.{body}">`, the scheme Stripe uses, verified with
  `verify_signature(secret, request.headers["Luminal-Signature"], raw_body, tolerance_s=300)`;
- Standard Webhooks (standardwebhooks.com): `webhook-id` (the same on every retry of one event, so a receiver
  can drop duplicates), `webhook-timestamp` and `webhook-signature: v1,<base64 HMAC over "{id}.{timestamp}.{body}">`,
  so any Standard Webhooks library verifies a delivery. Those libraries take the secret as `whsec_` followed by
  the base64 of the key's bytes: `standard_webhooks_secret(secret)` writes it so.

A receiver recomputes the HMAC over the raw body it received and checks the timestamp is recent, so a forged body
fails the HMAC and a replayed old delivery fails the timestamp.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

SIGNATURE_HEADER = "Luminal-Signature"
ID_HEADER, TIMESTAMP_HEADER, STANDARD_SIGNATURE_HEADER = "webhook-id", "webhook-timestamp", "webhook-signature"
DEFAULT_TOLERANCE_S = 300  # how old a delivery a receiver accepts: clock skew plus our retries fit easily


def _hmac(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, timestamp: int | None = None) -> str:
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={_hmac(secret, t, body)}"


def verify_signature(
    secret: str, header: str, body: bytes | str, tolerance_s: float = DEFAULT_TOLERANCE_S, now: float | None = None
) -> bool:
    """True when `header` (a Luminal-Signature value) signs exactly `body` with `secret` and its timestamp is
    within `tolerance_s` of `now`. Several v1 entries are allowed (any may match), as during a secret rotation."""
    raw = body.encode() if isinstance(body, str) else body
    timestamp, candidates = None, []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    expected = _hmac(secret, timestamp, raw)
    return any(hmac.compare_digest(expected.encode(), c.encode()) for c in candidates)


def standard_signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks `webhook-signature` value: `v1,` and the base64 HMAC of "{id}.{timestamp}.{body}"."""
    digest = hmac.new(secret.encode(), f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def standard_webhooks_secret(secret: str) -> str:
    """The secret in the form Standard Webhooks libraries take (`Webhook(standard_webhooks_secret(s))`)."""
    return "whsec_" + base64.b64encode(secret.encode()).decode("ascii")


def signed_headers(secret: str, message_id: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Every signature header of one delivery attempt, both schemes signing the same moment."""
    t = int(time.time()) if timestamp is None else timestamp
    return {
        SIGNATURE_HEADER: signature_header(secret, body, t),
        ID_HEADER: message_id,
        TIMESTAMP_HEADER: str(t),
        STANDARD_SIGNATURE_HEADER: standard_signature(secret, message_id, t, body),
    }
