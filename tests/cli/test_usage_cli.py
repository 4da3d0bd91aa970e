"""`luminal usage` against a real server whose ledger holds known batches: table, CSV and JSON show the
server's numbers; errors are one line with exit status 1."""

from __future__ import annotations

import csv
import io
import json
import uuid

import pytest
from typer.testing import CliRunner

from luminal.cli.main import app
from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.ledger import SqlUsageLedger
from tests.gateway.conftest import BOOTSTRAP_KEY

runner = CliRunner()
MIDNIGHT = 1_700_006_400  # 2023-11-15T00:00:00Z
WINDOW = ["--since", "2023-11-15T00:00:00Z", "--until", str(MIDNIGHT + 86400)]


@pytest.fixture
def billed(server):
    ledger = SqlUsageLedger(server.platform.db, {"h100": 2.0, "cpu": 0.5})
    batches = [
        (1, "alpha", "h100", 10.0, 1.5, 2),
        (1, "alpha", "h100", 3700.0, 0.5, 1),
        (2, "beta", "cpu", 20.0, 4.0, 3),
    ]
    for deployment, model, gpu, offset, seconds, requests in batches:
        record = UsageRecord(
            batch_id=uuid.uuid4().hex,
            deployment_id=deployment,
            tenant_id=1,
            worker_id="w",
            gpu_type=gpu,
            started_at=MIDNIGHT + offset,
            ended_at=MIDNIGHT + offset + seconds,
            request_ids=tuple(uuid.uuid4().hex for _ in range(requests)),  # each batch its own requests
            request_rows=(1,) * requests,
            model_name=model,
            model_version=1,
        )
        assert ledger.record(record)
    return server


def usage(server, *args: str, key: str = BOOTSTRAP_KEY):
    env = {"LUMINAL_URL": server.url, "LUMINAL_API_KEY": key, "COLUMNS": "200"}
    return runner.invoke(app, ["usage", *args], env=env)


def test_table_shows_each_row_and_the_totals(billed):
    result = usage(billed, *WINDOW, "--by", "day")
    assert result.exit_code == 0, result.output
    rows = [[cell for cell in line.split() if cell not in ("│", "┃")] for line in result.stdout.splitlines()]
    # Period, deployment, model, version, requests, batches, GPU-seconds, cost.
    assert ["2023-11-15T00:00:00Z", "1", "alpha", "v1", "3", "2", "2.000", "4.000000"] in rows
    assert ["2023-11-15T00:00:00Z", "2", "beta", "v1", "3", "1", "4.000", "2.000000"] in rows
    assert ["Total", "6", "3", "6.000", "6.000000"] in rows


def test_csv_and_json_carry_the_servers_numbers(billed):
    report = billed.client().get("/v1/usage", params={"since": MIDNIGHT, "until": MIDNIGHT + 86400}).json()
    as_json = usage(billed, *WINDOW, "--format", "json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == report
    as_csv = usage(billed, *WINDOW, "--format", "csv")
    table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["deployment_id"], r["model"], r["requests"], float(r["gpu_seconds"])) for r in table] == [
        (str(r["deployment_id"]), r["model"], str(r["requests"]), r["gpu_seconds"]) for r in report["rows"]
    ]
    assert len(table) == 3  # by the hour: alpha in hours 0 and 1, beta in hour 0


def test_deployment_filter(billed):
    result = usage(billed, *WINDOW, "--deployment", "2", "--format", "json")
    assert [r["model"] for r in json.loads(result.stdout)["rows"]] == ["beta"]


def test_an_empty_window_says_so(billed):
    result = usage(billed, "--since", "2020-01-01", "--until", "2020-01-02")
    assert result.exit_code == 0 and "No usage from 2020-01-01" in result.stdout


@pytest.mark.parametrize(
    "args,key,message",
    [
        (["--by", "week"], BOOTSTRAP_KEY, "400: by: expected one of hour, second, day, got 'week'"),
        (["--since", "yesterday"], BOOTSTRAP_KEY, "400: since: 'yesterday' is neither"),
        (["--format", "xml"], BOOTSTRAP_KEY, "--format must be one of table, csv, json, not 'xml'"),
        ([], "lm_wrong-key", "401: invalid or revoked API key"),
    ],
)
def test_errors_are_one_line(billed, args, key, message):
    result = usage(billed, *args, key=key)
    assert result.exit_code == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
