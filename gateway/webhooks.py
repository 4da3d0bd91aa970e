"""Webhook deliveries: when a prediction starts or finishes (the events it asked for), its document is POSTed,
signed, to the URL the client gave.

Where a delivery may go is `webhook_targets.py`'s rule: the URL's name is resolved once, every address checked,
and the request is sent to a checked address with the name kept in Host and TLS's SNI, so a name that resolves
elsewhere by now (DNS rebinding) cannot turn the delivery inward. Redirects are never followed: a 3xx is a failed
delivery that names where it pointed (Stripe and Replicate do the same; a receiver gives its final URL).
How deliveries are signed is `webhook_signatures.py`.

The secret is `LUMINAL_WEBHOOK_SECRET`, or (unset) one generated on the first start and kept in
`<data_dir>/webhook_secret`, so it survives restarts.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio.to_thread
import httpx

from luminal.gateway.webhook_signatures import signed_headers
from luminal.gateway.webhook_targets import IPAddress, RefusedTarget, Target, check_target
from luminal.store.settings import Settings

# The events a prediction may ask for, as Replicate names them: when it starts running, and when it ends
# (succeeded or failed). Replicate's default when none are chosen is "new output or finished"; a prediction's
# output arrives only when it finishes, so that default is "completed" alone.
START, COMPLETED = "start", "completed"
EVENTS = (START, COMPLETED)
DEFAULT_EVENTS = frozenset({COMPLETED})

MAX_URL_CHARS = 2048  # what browsers and most proxies accept; a longer "URL" is an attack, not an address
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
    message_id: str | None = None,
    allow_private: bool = False,
    attempts: int = ATTEMPTS,
    timeout_s: float = TIMEOUT_S,
    backoff_s: float = BACKOFF_S,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Delivery:
    """POST `body` (JSON) to `url` if its target passes the address rule (else no attempt at all), signed afresh on
    each attempt (so the timestamp is the sending time) under one `message_id`; retry network errors, 429 and 5xx
    with doubling backoff. `transport` replaces the network, for tests."""
    try:
        target = await anyio.to_thread.run_sync(check_target, url, allow_private)
    except RefusedTarget as e:
        return Delivery(False, 0, str(e))
    message_id = message_id or f"msg_{uuid.uuid4().hex}"
    error = "not attempted"
    # trust_env=False: no proxy from the environment, which would connect on its own terms, not to our address.
    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False, trust_env=False, transport=transport) as c:
        for attempt in range(1, attempts + 1):
            # Each attempt connects to a checked address (the next one when there are several: the last may be
            # down), never to what a fresh lookup would give.
            address = target.addresses[(attempt - 1) % len(target.addresses)]
            request = _pinned_request(c, target, address, body, signed_headers(secret, message_id, body))
            try:
                response = await c.send(request, stream=True)  # the receiver's body is never read: it may be huge
                await response.aclose()
            except httpx.HTTPError as e:
                error = f"{type(e).__name__}: {str(e)[:200]}"
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return Delivery(True, attempt)
                error = f"the receiver answered HTTP {status}"
                if response.is_redirect:
                    location = response.headers.get("location", "")
                    error += f", a redirect to {location!r:.200}; webhooks follow no redirects: give the final URL"
                if not _retryable(status):
                    return Delivery(False, attempt, error)
            if attempt < attempts:
                await asyncio.sleep(backoff_s * 2 ** (attempt - 1))
    return Delivery(False, attempts, error)


def _pinned_request(
    client: httpx.AsyncClient, target: Target, address: IPAddress, body: bytes, signatures: dict[str, str]
) -> httpx.Request:
    headers = {"Host": target.host_header, "Content-Type": "application/json", **signatures}
    # TLS still names, and checks the certificate against, the host the client gave, not the address.
    extensions = {"sni_hostname": target.server_name} if target.url.scheme == "https" else {}
    return client.build_request("POST", target.url_at(address), content=body, headers=headers, extensions=extensions)


@dataclass(frozen=True)
class WebhookSender:
    """The gateway's way of sending webhooks: its secret and whether private targets are allowed."""

    secret: str
    allow_private: bool = False

    async def send(self, url: str, body: bytes, message_id: str) -> Delivery:
        return await deliver(url, body, self.secret, message_id, self.allow_private)
