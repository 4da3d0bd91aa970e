"""`luminal login`: check a key against the server and save the address and key for every later command."""

from __future__ import annotations

import typer

from luminal.cli.client import ClientError, PlatformClient
from luminal.cli.common import KeyOption, UrlOption, fail, out
from luminal.cli.config import resolve, write_config


def login(url: UrlOption = None, api_key: KeyOption = None) -> None:
    """Save the platform's address and your API key to the config file ($LUMINAL_CONFIG or
    ~/.config/luminal/config.toml, mode 0600). Without --api-key the key is asked for, without echo."""
    try:
        conn = resolve(url, None)  # the key is never taken from an earlier login: logging in is choosing one
        key = (api_key or typer.prompt("API key", hide_input=True)).strip()
        if not key:
            fail("no API key given")
        client = PlatformClient(conn.url, key)
        try:
            keys = client.list_keys()  # proves the key: any call that needs one would do
        finally:
            client.close()
        path = write_config({"url": conn.url, "api_key": key})
    except ClientError as e:
        fail(f"login failed: {e}")
    active = sum(1 for k in keys if k["revoked_at"] is None)
    out.print(f"Logged in to {conn.url} ({active} active key(s) on this account).", highlight=False, markup=False)
    out.print(f"Saved to {path}.", highlight=False, markup=False)
