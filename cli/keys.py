"""`luminal keys ls | create [--name N] | revoke ID`: the tenant's API keys."""

from __future__ import annotations

from typing import Annotated

import typer

from luminal.cli.common import KeyOption, UrlOption, err, out, print_table, short_time
from luminal.cli.config import client_session

app = typer.Typer(help="List, create and revoke API keys.", no_args_is_help=True)


@app.command("ls")
def list_keys(url: UrlOption = None, api_key: KeyOption = None) -> None:
    """Every key, revoked ones too; a key shows only its first characters."""
    with client_session(url, api_key) as client:
        keys = client.list_keys()
    rows = [
        (k["id"], k["name"], f"{k['prefix']}…" if k["prefix"] else None, short_time(k["created_at"]),
         short_time(k["revoked_at"]) or "active")
        for k in keys
    ]  # fmt: skip
    print_table(("ID", "NAME", "KEY", "CREATED", "REVOKED"), rows, empty="No keys.")


@app.command("create")
def create_key(
    name: Annotated[str | None, typer.Option(help="a label to recognise the key by")] = None,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Print a new key on stdout (alone, so `$(luminal keys create)` captures it); it is never shown again."""
    with client_session(url, api_key) as client:
        key = client.create_key(name)
    label = f" ({key['name']})" if key["name"] else ""
    err.print(f"Created API key {key['id']}{label}; it is shown only this once:", highlight=False, markup=False)
    out.print(key["key"], highlight=False, markup=False, soft_wrap=True)


@app.command("revoke")
def revoke_key(
    key_id: Annotated[int, typer.Argument(min=1, help="the key's id (see `luminal keys ls`)")],
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    with client_session(url, api_key) as client:
        key = client.revoke_key(key_id)
    out.print(f"Revoked API key {key['id']} at {short_time(key['revoked_at'])}.", highlight=False)
