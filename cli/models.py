"""`luminal models ls | rm NAME [--version V]`: the tenant's uploaded models and their versions."""

from __future__ import annotations

from typing import Annotated

import typer

from luminal.cli.common import KeyOption, UrlOption, out, print_table, short_time
from luminal.cli.config import client_session

app = typer.Typer(help="List and delete uploaded models.", no_args_is_help=True)


def _signature(tensors: list[dict]) -> str:
    return ", ".join(f"{t['name']}:{t['datatype']}{t['shape']}" for t in tensors)


@app.command("ls")
def list_models(url: UrlOption = None, api_key: KeyOption = None) -> None:
    """One row per model: its versions, and the newest version's inputs and outputs."""
    with client_session(url, api_key) as client:
        models = client.list_models()
    rows = []
    for m in models:
        newest = m["versions"][-1] if m["versions"] else None
        versions = ",".join(str(v["version"]) for v in m["versions"])
        inputs, outputs = (_signature(newest["inputs"]), _signature(newest["outputs"])) if newest else (None, None)
        rows.append((m["name"], versions, inputs, outputs, short_time(m["created_at"])))
    print_table(("NAME", "VERSIONS", "INPUTS", "OUTPUTS", "CREATED"), rows, empty="No models.")


@app.command("rm")
def remove_model(
    name: Annotated[str, typer.Argument(help="the model's name")],
    version: Annotated[int | None, typer.Option(min=1, help="delete only this version")] = None,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Delete the model (or one version of it) with its deployments."""
    with client_session(url, api_key) as client:
        client.delete_model(name, version)
    what = f"{name} version {version}" if version is not None else f"{name} (every version)"
    out.print(f"Deleted model {what}.", highlight=False, markup=False)
