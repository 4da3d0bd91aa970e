"""`luminal adapters ls ID | add ID NAME ADAPTER_DIR | rm ID NAME`: the LoRA adapters of a live language-model
deployment (one deployed with --lora or --lora-slots). An added adapter is served as model NAME by every running
worker, without a restart, once each has loaded it (a moment); a removed one is refused to new requests while the
sequences using it finish."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from luminal.cli.common import KeyOption, UrlOption, fail, out, print_table
from luminal.cli.config import client_session
from luminal.cli.deployments import IdArgument

app = typer.Typer(help="List, add and remove a deployment's LoRA adapters.", no_args_is_help=True)
NameArgument = Annotated[str, typer.Argument(help="the adapter's name: the model name requests call it by")]


@app.command("ls")
def list_adapters(deployment_id: IdArgument, url: UrlOption = None, api_key: KeyOption = None) -> None:
    with client_session(url, api_key) as client:
        adapters = client.list_adapters(deployment_id)
    rows = [(a["name"], "live" if a["added_live"] else "deployed") for a in adapters]
    print_table(("NAME", "ADDED"), rows, empty=f"Deployment {deployment_id} serves no adapters.")


@app.command("add")
def add_adapter(
    deployment_id: IdArgument,
    name: NameArgument,
    folder: Annotated[Path, typer.Argument(help="a PEFT LoRA folder (adapter_config.json, adapter_model.safetensors)")],
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    from luminal.lora_adapter import LoraRefused, upload_body

    try:
        body = upload_body(name, folder)
    except (LoraRefused, OSError, ValueError) as e:
        fail(str(e))
    with client_session(url, api_key) as client:
        client.add_adapter(deployment_id, body)
    out.print(f"Adapter {name} is served by deployment {deployment_id}: call it as model {name!r}.", highlight=False)


@app.command("rm")
def remove_adapter(deployment_id: IdArgument, name: NameArgument, url: UrlOption = None, api_key: KeyOption = None):
    with client_session(url, api_key) as client:
        client.remove_adapter(deployment_id, name)
    out.print(f"Removed adapter {name} from deployment {deployment_id}.", highlight=False)
