"""`luminal deployments traffic NAME [VERSION=PERCENT ...] | rollback NAME`: how a model's requests that name no
version are shared among its ready versions (a canary: `traffic tiny 1=90 2=10`), and undoing the last change.
Registered on `luminal deployments` by cli/main.py importing this module."""

from __future__ import annotations

from typing import Annotated

import typer

from luminal.cli.common import KeyOption, UrlOption, fail, out, print_table, short_time
from luminal.cli.config import client_session
from luminal.cli.deployments import app

ModelArgument = Annotated[str, typer.Argument(help="the model's name")]


def parse_split(pairs: list[str]) -> dict[int, int]:
    """`["1=90", "2=10"]` as {1: 90, 2: 10}; typer.BadParameter naming the first bad pair."""
    split: dict[int, int] = {}
    for pair in pairs:
        version, sep, percent = pair.partition("=")
        if not sep or not _whole(version) or not _whole(percent):
            raise typer.BadParameter(f"{pair!r} is not VERSION=PERCENT with whole numbers (e.g. 2=10)")
        v, p = int(version), int(percent)  # typed as given: no spaces around '='
        if v < 1 or not 1 <= p <= 100:
            raise typer.BadParameter(f"{pair!r}: versions start at 1 and a percent is 1..100")
        if v in split:
            raise typer.BadParameter(f"version {v} is given twice")
        split[v] = p
    if sum(split.values()) != 100:
        raise typer.BadParameter(f"the percentages sum to {sum(split.values())}, not 100")
    return split


def _whole(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 9  # str.isdigit() alone also admits '²'


def _show(traffic: dict) -> None:
    if traffic["split"] is None:
        out.print(f"{traffic['model']}: no traffic split; the newest deployed version answers.", highlight=False)
        return
    rows = [(v["version"], f"{v['percent']}%", v["status"]) for v in traffic["versions"]]
    print_table(("VERSION", "TRAFFIC", "STATUS"), rows, empty="")


@app.command("traffic")
def traffic(
    name: ModelArgument,
    split: Annotated[list[str] | None, typer.Argument(help="VERSION=PERCENT pairs summing to 100; none: show")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="remove the split: the newest version answers")] = False,
    history: Annotated[bool, typer.Option("--history", help="list the split's changes, newest first")] = False,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Show, set or clear the share of NAME's requests each ready version answers (`traffic tiny 1=90 2=10`).
    A version stays reachable at /v2/models/NAME/versions/V whether it takes traffic or not."""
    if sum((bool(split), clear, history)) > 1:
        fail("give a split, --clear or --history, not several")
    parsed = parse_split(split) if split else None
    with client_session(url, api_key) as client:
        if history:
            _print_history(client.traffic_history(name))
            return
        if parsed is not None:
            shown = client.set_traffic(name, parsed)
        elif clear:
            shown = client.clear_traffic(name)
        else:
            shown = client.traffic(name)
    _show(shown)


@app.command("rollback")
def rollback(name: ModelArgument, url: UrlOption = None, api_key: KeyOption = None) -> None:
    """Restore NAME's traffic split from before its last change (a second rollback undoes the first)."""
    with client_session(url, api_key) as client:
        shown = client.rollback_traffic(name)
    out.print(f"Rolled back {name}'s traffic split.", highlight=False, markup=False)
    _show(shown)


def _print_history(changes: list[dict]) -> None:
    def described(split: dict | None) -> str:
        return "newest version" if split is None else " ".join(f"{v}={p}" for v, p in split.items())

    rows = [
        (c["id"], short_time(c["changed_at"]), c["action"], described(c["old_split"]), described(c["new_split"]),
         c["api_key_name"] or c["api_key_id"])
        for c in changes
    ]  # fmt: skip
    print_table(("ID", "WHEN (UTC)", "ACTION", "FROM", "TO", "BY KEY"), rows, empty="No traffic split changes.")
