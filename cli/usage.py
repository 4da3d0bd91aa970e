"""`luminal usage`: billed GPU-seconds and cost per period and deployment, as a table, CSV or JSON.

The report is always fetched as JSON and written here in the chosen form, so CSV and table show the same
numbers. Registered on the `luminal` app by cli/main.py importing this module.
"""

from __future__ import annotations

import csv
import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from luminal.cli.config import client_session
from luminal.cli.main import KeyOption, UrlOption, app, fail, out

FORMATS = ("table", "csv", "json")
COLUMNS = ["period_start", "deployment_id", "model", "version", "requests", "batches", "gpu_seconds", "cost"]


def _table(report: dict) -> Table:
    table = Table(title=f"Usage by {report['by']}, {report['since']} to {report['until']}", show_footer=True)
    totals = report["totals"]
    table.add_column("Period (UTC)", footer="Total", no_wrap=True)
    table.add_column("Deployment")
    table.add_column("Model")
    table.add_column("Requests", justify="right", footer=str(totals["requests"]))
    table.add_column("Batches", justify="right", footer=str(totals["batches"]))
    table.add_column("GPU-seconds", justify="right", footer=f"{totals['gpu_seconds']:.3f}")
    table.add_column("Cost (USD)", justify="right", footer=f"{totals['cost']:.6f}")
    for row in report["rows"]:
        model = f"{row['model']} v{row['version']}" if row["model"] is not None else "(deleted)"
        table.add_row(
            row["period_start"],
            str(row["deployment_id"]),
            model,
            str(row["requests"]),
            str(row["batches"]),
            f"{row['gpu_seconds']:.3f}",
            f"{row['cost']:.6f}",
        )
    return table


def _write_csv(report: dict) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in report["rows"]:
        writer.writerow(["" if row[c] is None else row[c] for c in COLUMNS])


@app.command()
def usage(
    url: UrlOption = None,
    api_key: KeyOption = None,
    since: Annotated[str | None, typer.Option(help="start, ISO 8601 or epoch seconds (default: 24 h ago)")] = None,
    until: Annotated[str | None, typer.Option(help="end, ISO 8601 or epoch seconds (default: now)")] = None,
    by: Annotated[str, typer.Option(help="period: second, hour or day")] = "hour",
    format: Annotated[str, typer.Option(help="table, csv or json")] = "table",  # noqa: A002  (the option's name)
    deployment: Annotated[int | None, typer.Option(help="only this deployment id")] = None,
) -> None:
    """Billed GPU-seconds and cost of your batches per period and deployment, with totals."""
    if format not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, not {format!r}")
    with client_session(url, api_key) as client:
        report = client.usage(since=since, until=until, by=by, deployment_id=deployment)
    if format == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    elif format == "csv":
        _write_csv(report)
    elif not report["rows"]:
        out.print(f"No usage from {report['since']} to {report['until']}.", highlight=False)
    else:
        # A console made now, not at import: it reads the terminal's width (COLUMNS) as it is for this command.
        Console().print(_table(report))
