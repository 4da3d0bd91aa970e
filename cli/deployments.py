"""`luminal deployments ls | scale ID [...] | rm ID`: deployments and their batching and scaling settings."""

from __future__ import annotations

from typing import Annotated

import typer

from luminal.cli.common import KeyOption, UrlOption, fail, out, print_table
from luminal.cli.config import client_session

app = typer.Typer(help="List, scale and delete deployments.", no_args_is_help=True)
IdArgument = Annotated[int, typer.Argument(min=1, help="the deployment's id (see `luminal deployments ls`)")]


@app.command("ls")
def list_deployments(url: UrlOption = None, api_key: KeyOption = None) -> None:
    with client_session(url, api_key) as client:
        deployments = client.list_deployments()
    rows = [
        (
            d["id"],
            d["model"],
            d["version"],
            d["gpu_type"],
            d["status"],
            f"{d['min_replicas']}-{d['max_replicas']}",
            d["max_batch_size"],
            d["max_queue_delay_ms"],
        )
        for d in deployments
    ]
    columns = ("ID", "MODEL", "VERSION", "GPU", "STATUS", "REPLICAS", "MAX BATCH", "MAX DELAY MS")
    print_table(columns, rows, empty="No deployments.")
    for d in deployments:
        if d["status"] in ("failed", "unschedulable"):
            out.print(f"deployment {d['id']} {d['status']}: {d['error']}", highlight=False, markup=False)


@app.command("scale")
def scale(
    deployment_id: IdArgument,
    min_replicas: Annotated[int | None, typer.Option("--min", help="workers kept warm")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max", help="most workers")] = None,
    max_batch_size: Annotated[int | None, typer.Option(help="largest batch the scheduler forms")] = None,
    max_delay_ms: Annotated[int | None, typer.Option(help="longest a request waits for its batch")] = None,
    url: UrlOption = None,
    api_key: KeyOption = None,
) -> None:
    """Change any of the settings; the server checks their ranges and that --min <= --max."""
    given = {"min_replicas": min_replicas, "max_replicas": max_replicas, "max_batch_size": max_batch_size}
    given["max_queue_delay_ms"] = max_delay_ms
    changes = {k: v for k, v in given.items() if v is not None}
    if not changes:
        fail("nothing to change: give --min, --max, --max-batch-size or --max-delay-ms")
    with client_session(url, api_key) as client:
        d = client.update_deployment(deployment_id, **changes)
    out.print(
        f"Deployment {d['id']} ({d['model']} version {d['version']}): replicas {d['min_replicas']}-"
        f"{d['max_replicas']}, max batch {d['max_batch_size']}, max delay {d['max_queue_delay_ms']} ms.",
        highlight=False,
        markup=False,
    )


@app.command("rm")
def remove_deployment(deployment_id: IdArgument, url: UrlOption = None, api_key: KeyOption = None) -> None:
    with client_session(url, api_key) as client:
        client.delete_deployment(deployment_id)
    out.print(f"Deleted deployment {deployment_id}.", highlight=False)
