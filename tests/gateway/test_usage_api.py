"""/v1/usage on a real server (SQLite and PostgreSQL): records written through the ledger come back aggregated
by second, hour and day, in JSON and CSV, equal to sums computed here; a tenant sees only its own usage; every
bad parameter is a 400 naming it."""

from __future__ import annotations

import csv
import datetime as dt
import io
import time
import uuid
from collections import defaultdict

import pytest

from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.ledger import SqlUsageLedger
from luminal.store.tenants import create_tenant

DAY = 86400
MIDNIGHT = 1_700_006_400  # 2023-11-15T00:00:00Z
# (deployment, model, version, gpu, start offset from MIDNIGHT, seconds, rows of each request)
BATCHES = [
    (1, "alpha", 1, "h100", 10.25, 0.5, (1, 2)),
    (1, "alpha", 1, "h100", 10.75, 0.25, (3,)),
    (2, "beta", 3, "cpu", 10.5, 1.0, (1, 1, 1)),
    (1, "alpha", 1, "h100", 3605.0, 2.0, (4,)),
    (2, "beta", 3, "cpu", DAY + 7.0, 0.125, (2, 2)),
]
WINDOW = {"since": str(MIDNIGHT), "until": str(MIDNIGHT + 2 * DAY)}


def record(tenant_id, deployment, model, version, gpu, offset, seconds, rows) -> UsageRecord:
    start = MIDNIGHT + offset
    return UsageRecord(
        batch_id=uuid.uuid4().hex,
        deployment_id=deployment,
        tenant_id=tenant_id,
        worker_id="w1",
        gpu_type=gpu,
        started_at=start,
        ended_at=start + seconds,
        request_ids=tuple(uuid.uuid4().hex for _ in rows),
        request_rows=rows,
        model_name=model,
        model_version=version,
    )


@pytest.fixture
def billed(server):
    """The bootstrap tenant's BATCHES in the ledger, plus a batch of a second tenant; returns that tenant's key."""
    platform = server.platform
    ledger = SqlUsageLedger(platform.db, platform.settings.gpu_prices_per_second)
    with platform.db.session() as s:
        other, other_key = create_tenant(s, "other")
    first_tenant = 1
    for batch in BATCHES:
        assert ledger.record(record(first_tenant, *batch))
    assert ledger.record(record(other.id, 9, "gamma", 1, "h100", 10.0, 5.0, (1,)))
    return other_key


def expected_rows(width: int, prices: dict[str, float]) -> list[dict]:
    """The report computed here, batch by batch."""
    sums: dict[tuple, dict] = defaultdict(
        lambda: dict(requests=0, batches=0, gpu_seconds=0.0, cost=0.0, prompt_tokens=0, completion_tokens=0)
    )  # tensor batches: no tokens
    for deployment, model, version, gpu, offset, seconds, rows in BATCHES:
        start = MIDNIGHT + offset
        line = sums[(start // width * width, deployment, model, version)]
        line["requests"] += len(rows)
        line["batches"] += 1
        line["gpu_seconds"] += seconds
        line["cost"] += seconds * prices[gpu]
    return [
        dict(
            period_start=dt.datetime.fromtimestamp(p, dt.UTC).isoformat().replace("+00:00", "Z"),
            deployment_id=d,
            model=m,
            version=v,
            **s,
        )  # fmt: skip
        for (p, d, m, v), s in sorted(sums.items())
    ]


def approx_rows(rows: list[dict]) -> list[dict]:
    return [{**r, "gpu_seconds": pytest.approx(r["gpu_seconds"]), "cost": pytest.approx(r["cost"])} for r in rows]


@pytest.mark.parametrize("by,width", [("second", 1), ("hour", 3600), ("day", DAY)])
def test_json_report_equals_the_sums_by_hand(server, billed, by, width):
    prices = server.platform.settings.gpu_prices_per_second
    answer = server.client().get("/v1/usage", params={**WINDOW, "by": by})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["by"] == by and report["since"].startswith("2023-11-15T00:00:00")
    assert report["rows"] == approx_rows(expected_rows(width, prices))
    total_seconds = sum(b[5] for b in BATCHES)
    assert report["totals"] == {
        "requests": 9,
        "batches": 5,
        "gpu_seconds": pytest.approx(total_seconds),
        "cost": pytest.approx(sum(b[5] * prices[b[3]] for b in BATCHES)),
        "prompt_tokens": 0,
        "completion_tokens": 0,
    }


def test_daily_rows_by_hand(server, billed):
    rows = server.client().get("/v1/usage", params={**WINDOW, "by": "day"}).json()["rows"]
    summary = [(r["period_start"][:10], r["deployment_id"], r["model"], r["requests"], r["batches"]) for r in rows]
    assert summary == [
        ("2023-11-15", 1, "alpha", 4, 3),
        ("2023-11-15", 2, "beta", 3, 1),
        ("2023-11-16", 2, "beta", 2, 1),
    ]
    assert [r["gpu_seconds"] for r in rows] == pytest.approx([2.75, 1.0, 0.125])


def test_csv_report_has_a_header_and_the_json_rows(server, billed):
    client = server.client()
    answer = client.get("/v1/usage", params={**WINDOW, "by": "hour", "format": "csv"})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    table = list(csv.reader(io.StringIO(answer.text)))
    header = ["period_start", "deployment_id", "model", "version", "requests", "batches", "gpu_seconds", "cost"]
    assert table[0] == [*header, "prompt_tokens", "completion_tokens"]
    json_rows = client.get("/v1/usage", params={**WINDOW, "by": "hour"}).json()["rows"]
    assert len(table) == 1 + len(json_rows) == 5  # hour 0 twice (two deployments), hour 1, the next day
    for cells, row in zip(table[1:], json_rows):
        parsed = dict(zip(header, cells))
        assert dt.datetime.fromisoformat(parsed["period_start"]) == dt.datetime.fromisoformat(row["period_start"])
        assert (int(parsed["deployment_id"]), parsed["model"], int(parsed["version"])) == (
            row["deployment_id"], row["model"], row["version"])  # fmt: skip
        assert (int(parsed["requests"]), int(parsed["batches"])) == (row["requests"], row["batches"])
        assert float(parsed["gpu_seconds"]) == pytest.approx(row["gpu_seconds"])
        assert float(parsed["cost"]) == pytest.approx(row["cost"])


def test_another_tenant_sees_only_its_own_usage(server, billed):
    other = server.client(key=billed)
    report = other.get("/v1/usage", params={**WINDOW, "by": "day"}).json()
    assert [(r["deployment_id"], r["model"]) for r in report["rows"]] == [(9, "gamma")]
    assert report["totals"]["gpu_seconds"] == pytest.approx(5.0)
    assert other.get("/v1/usage", params={**WINDOW, "deployment_id": "1"}).json()["rows"] == []
    assert [r["deployment_id"] for r in other.get("/v1/usage/records").json()] == [9]


def test_filters_by_deployment_and_by_a_half_open_window(server, billed):
    client = server.client()
    beta = client.get("/v1/usage", params={**WINDOW, "by": "day", "deployment_id": "2"}).json()
    assert [r["requests"] for r in beta["rows"]] == [3, 2] and beta["totals"]["batches"] == 2
    # since is inclusive and until exclusive; ISO times with or without an offset are UTC alike.
    first_hour = {"since": "2023-11-15T00:00:10.5", "until": "2023-11-15T00:00:10.75Z", "by": "second"}
    rows = client.get("/v1/usage", params=first_hour).json()["rows"]
    assert [(r["deployment_id"], r["batches"]) for r in rows] == [(2, 1)]


def test_the_default_window_is_the_last_day(server):
    platform = server.platform
    ledger = SqlUsageLedger(platform.db, platform.settings.gpu_prices_per_second)
    now = time.time()
    ledger.record(record(1, 1, "alpha", 1, "cpu", now - 600 - MIDNIGHT, 1.0, (1,)))
    ledger.record(record(1, 1, "alpha", 1, "cpu", now - 2 * DAY - MIDNIGHT, 3.0, (1,)))
    report = server.client().get("/v1/usage").json()
    assert report["by"] == "hour" and report["totals"]["gpu_seconds"] == pytest.approx(1.0)


def test_records_newest_first_capped_and_auditable(server, billed):
    client = server.client()
    records = client.get("/v1/usage/records", params={"limit": "3"}).json()
    assert [r["started_at"] - MIDNIGHT for r in records] == [DAY + 7.0, 3605.0, 10.75]
    for r in records:
        assert r["seconds"] == pytest.approx(r["ended_at"] - r["started_at"])
        assert r["cost"] == pytest.approx(r["seconds"] * r["price_per_second"])
        assert r["batch_size"] == len(r["request_ids"]) == len(r["request_rows"])
    everything = client.get("/v1/usage/records", params={"since": str(MIDNIGHT)}).json()
    assert sum(r["seconds"] for r in everything) == pytest.approx(
        client.get("/v1/usage", params=WINDOW).json()["totals"]["gpu_seconds"]
    )


def test_bad_parameters_are_400s_naming_them(server):
    client = server.client()
    year_by_second = {"since": "2020-01-01", "until": "2021-01-01", "by": "second"}
    cases = [
        ("/v1/usage", {"since": "yesterday"}, "since: 'yesterday' is neither an ISO 8601 time nor epoch seconds"),
        ("/v1/usage", {"until": "nan"}, "until: 'nan' is outside"),
        ("/v1/usage", {"since": "-5"}, "since: '-5' is outside"),
        ("/v1/usage", {"since": "1e300"}, "since: '1e300' is outside"),
        ("/v1/usage", {"since": "100", "until": "50"}, "since (1970-01-01T00:01:40+00:00) must be before until"),
        ("/v1/usage", {"by": "week"}, "by: expected one of hour, second, day, got 'week'"),
        ("/v1/usage", {"format": "xml"}, "format: expected one of json, csv, got 'xml'"),
        ("/v1/usage", {"deployment_id": "abc"}, "deployment_id: expected an integer from 1"),
        ("/v1/usage", {"deployment_id": "99999999999"}, "deployment_id: expected an integer from 1"),
        ("/v1/usage", year_by_second, "the range spans more than 1000000 periods of one second"),
        ("/v1/usage/records", {"limit": "0"}, "limit: expected an integer from 1 to 1000"),
        ("/v1/usage/records", {"limit": "5000"}, "limit: expected an integer from 1 to 1000"),
        ("/v1/usage/records", {"since": "x" * 100}, "since: too long to be a time"),
    ]
    for path, params, message in cases:
        answer = client.get(path, params=params)
        assert answer.status_code == 400, (params, answer.text)
        assert answer.json()["error"].startswith(message), answer.json()
    assert server.client(key=None).get("/v1/usage").status_code == 401
