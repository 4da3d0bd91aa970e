"""Signed webhook deliveries: when a prediction finishes, its document is POSTed to the URL the client gave.

Each delivery carries `Luminal-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, f"{t}.{body}")>`, the
scheme Stripe uses. A receiver recomputes the HMAC over the raw body it received and checks the timestamp is
recent, so a forged body fails the HMAC and a replayed old delivery fails the timestamp:

    from luminal.gateway.webhooks import verify_signature
    ok = verify_signature(secret, request.headers["Luminal-Signature"], raw_body, tolerance_s=300)

The secret is `LUMINAL_WEBHOOK_SECRET`, or (unset) one generated on the first start and kept in
`<data_dir>/webhook_secret`, so it survives restarts.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from luminal.gateway.settings import Settings

SIGNATURE_HEADER = "Luminal-Signature"
MAX_URL_CHARS = 2048  # what browsers and most proxies accept; a longer "URL" is an attack, not an address
DEFAULT_TOLERANCE_S = 300  # how old a delivery a receiver accepts: clock skew plus our retries fit easily
ATTEMPTS = 3
TIMEOUT_S = 5.0  # per attempt: a receiver should answer at once and do its work later
BACKOFF_S = 0.5  # before the second attempt; doubled before each later one
SECRET_FILE = "webhook_secret"


def check_webhook_url(url: str) -> str:
    """The URL if it is an absolute http(s) URL of reasonable length, else ValueError saying what is wrong."""
    if len(url) > MAX_URL_CHARS:
        raise ValueError(f"the webhook URL is {len(url)} characters, over the limit of {MAX_URL_CHARS}")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError("the webhook URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port raises ValueError on a malformed one
    except ValueError as e:
        raise ValueError(f"the webhook URL is malformed: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"the webhook URL must be http:// or https://, not {parts.scheme or 'relative'!r:.20}")
    if not parts.hostname:
        raise ValueError("the webhook URL has no host")
    return url


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


def webhook_secret(settings: Settings) -> str:
    """The configured secret, else the one kept under data_dir (created on the first call, readable only by
    this user). Safe when two processes start at once: one creates the file, the other reads it."""
    if settings.webhook_secret:
        return settings.webhook_secret
    path = Path(settings.data_dir) / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):  # the creator writes 64 characters right after creating: wait for them
            secret = path.read_text().strip()
            if secret:
                return secret
            time.sleep(0.01)
        raise RuntimeError(f"{path} is empty; delete it to generate a new webhook secret") from None
    secret = secrets.token_hex(32)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    return secret


@dataclass(frozen=True)
class Delivery:
    delivered: bool
    attempts: int
    error: str | None = None  # why the last attempt failed


def _retryable(status: int) -> bool:
    # The receiver may recover from overload or its own errors; any other refusal will not change on retry.
    return status == 429 or status >= 500


async def deliver(
    url: str,
    body: bytes,
    secret: str,
    attempts: int = ATTEMPTS,
    timeout_s: float = TIMEOUT_S,
    backoff_s: float = BACKOFF_S,
) -> Delivery:
    """POST `body` (JSON) to `url`, signed afresh on each attempt (so the timestamp is the sending time); retry
    network errors, 429 and 5xx with doubling backoff. Redirects are not followed: the URL is where it goes."""
    error = "not attempted"
    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
        for attempt in range(1, attempts + 1):
            headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature_header(secret, body)}
            try:
                response = await client.post(url, content=body, headers=headers)
            except (httpx.HTTPError, httpx.InvalidURL) as e:
                error = f"{type(e).__name__}: {str(e)[:200]}"
            else:
                if 200 <= response.status_code < 300:
                    return Delivery(True, attempt)
                error = f"the receiver answered HTTP {response.status_code}"
                if not _retryable(response.status_code):
                    return Delivery(False, attempt, error)
            if attempt < attempts:
                await asyncio.sleep(backoff_s * 2 ** (attempt - 1))
    return Delivery(False, attempts, error)
