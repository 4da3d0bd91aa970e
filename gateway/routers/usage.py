"""`/v1/usage`: the caller's billed GPU-seconds and cost per second, hour or day (JSON or CSV), and the raw
usage records behind them, so a bill can be audited batch by batch.

Query parameters arrive as text and are parsed here, so a bad one is a 400 naming it (not a generic 422).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import time

from fastapi import APIRouter, Response
from pydantic import BaseModel

from luminal.gateway.dependencies import DatabaseDep, PlatformDep, TenantDep
from luminal.gateway.errors import ApiError
from luminal.gateway.platform import Platform
from luminal.store import usage as usage_store
from luminal.store.tables import UsageRecordRow

router = APIRouter(prefix="/v1/usage", tags=["usage"])

DEFAULT_WINDOW_S = 24 * 3600
# Bound a report's size: ranges of at most a million periods (11 days by the second, a century by the hour)
# and at most MAX_ROWS (period, deployment) rows with usage; past either, the caller narrows the range.
MAX_PERIODS = 1_000_000
MAX_ROWS = 100_000
MAX_EPOCH_S = 253_402_300_799  # 9999-12-31T23:59:59Z, the last second a datetime can show
MAX_RECORDS = 1000
MAX_PARAM_CHARS = 64
MAX_ID = 2**31 - 1  # the columns are 32-bit integers
CSV_COLUMNS = ["period_start", "deployment_id", "model", "version", "requests", "batches", "gpu_seconds", "cost"]
CSV_COLUMNS += ["prompt_tokens", "completion_tokens"]  # language models' sequences (0 for tensor batches)


class UsageTotalsPublic(BaseModel):
    requests: int
    batches: int
    gpu_seconds: float  # billed: the sum of the batches' execution times
    cost: float  # USD
    prompt_tokens: int = 0  # language models' sequences: tokens read and generated
    completion_tokens: int = 0


class UsageLinePublic(UsageTotalsPublic):
    period_start: dt.datetime
    deployment_id: int
    model: str | None
    version: int | None


class UsageReport(BaseModel):
    since: dt.datetime
    until: dt.datetime
    by: str
    rows: list[UsageLinePublic]
    totals: UsageTotalsPublic


class UsageRecordPublic(BaseModel):
    batch_id: str
    deployment_id: int
    model: str | None
    version: int | None
    worker_id: str
    gpu_type: str
    started_at: float  # epoch seconds
    ended_at: float
    seconds: float  # billed: ended_at - started_at
    batch_size: int
    request_ids: list[str]
    request_rows: list[int]
    price_per_second: float
    cost: float
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @classmethod
    def of(cls, row: UsageRecordRow) -> UsageRecordPublic:
        fields = {name: getattr(row, name) for name in cls.model_fields if name not in ("model", "version")}
        return cls(model=row.model_name, version=row.model_version, **fields)


def written_so_far(platform: Platform) -> None:
    """Usage is written off the serving path (this process's thread workers' buffered ledger; the usage records
    worker processes stored in Redis): a report waits until every batch answered so far is in the database."""
    if platform.ledger is not None:
        platform.ledger.flush()
    if platform.usage_drainer is not None:
        platform.usage_drainer.flush()


def _utc(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


def parse_time(name: str, raw: str | None, default: float) -> float:
    """Epoch seconds from ISO 8601 (UTC when no offset is given) or a number of epoch seconds."""
    if raw is None:
        return default
    text = raw.strip()
    if len(text) > MAX_PARAM_CHARS:
        raise ApiError(400, f"{name}: too long to be a time")
    try:
        value = float(text)
    except ValueError:
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            raise ApiError(400, f"{name}: {text!r} is neither an ISO 8601 time nor epoch seconds") from None
        value = (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()
    if not math.isfinite(value) or not 0 <= value <= MAX_EPOCH_S:
        raise ApiError(400, f"{name}: {text!r} is outside 1970-01-01 .. 9999-12-31")
    return value


def parse_int(name: str, raw: str | None, default: int | None, lo: int, hi: int) -> int | None:
    if raw is None:
        return default
    text = raw.strip()
    if not text.isascii() or not text.isdigit() or len(text) > MAX_PARAM_CHARS or not lo <= int(text) <= hi:
        raise ApiError(400, f"{name}: expected an integer from {lo} to {hi}, got {raw[:MAX_PARAM_CHARS]!r}")
    return int(text)


def parse_choice(name: str, raw: str | None, choices: list[str]) -> str:
    if raw is None:
        return choices[0]
    if raw not in choices:
        raise ApiError(400, f"{name}: expected one of {', '.join(choices)}, got {raw[:MAX_PARAM_CHARS]!r}")
    return raw


def parse_window(since: str | None, until: str | None) -> tuple[float, float]:
    end = parse_time("until", until, time.time())
    start = parse_time("since", since, end - DEFAULT_WINDOW_S)
    if start >= end:
        raise ApiError(400, f"since ({_utc(start).isoformat()}) must be before until ({_utc(end).isoformat()})")
    return start, end


def _csv(report: UsageReport) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for line in report.rows:
        cells = line.model_dump()
        cells["period_start"] = line.period_start.isoformat()
        writer.writerow(["" if cells[c] is None else cells[c] for c in CSV_COLUMNS])
    return buffer.getvalue()


_CSV_DOC = {200: {"content": {"text/csv": {}}, "description": "the report (JSON, or CSV with format=csv)"}}


@router.get("", response_model=UsageReport, responses=_CSV_DOC)
def usage_report(
    tenant: TenantDep,
    db: DatabaseDep,
    platform: PlatformDep,
    since: str | None = None,
    until: str | None = None,
    by: str | None = None,
    format: str | None = None,  # noqa: A002  (the query parameter's public name)
    deployment_id: str | None = None,
):
    """Billed GPU-seconds and cost per period (`by`: hour, the default, second or day) and deployment, for
    batches started in [since, until) (ISO 8601 or epoch seconds; default the last 24 h); `format` json or csv.
    The CSV holds the rows only (no totals row, so its columns sum to the totals)."""
    start, end = parse_window(since, until)
    written_so_far(platform)
    by = parse_choice("by", by, ["hour", "second", "day"])
    fmt = parse_choice("format", format, ["json", "csv"])
    deployment = parse_int("deployment_id", deployment_id, None, 1, MAX_ID)
    width = usage_store.PERIOD_SECONDS[by]
    if math.ceil((end - start) / width) > MAX_PERIODS:
        raise ApiError(
            400, f"the range spans more than {MAX_PERIODS} periods of one {by}: narrow it or use a coarser by"
        )
    with db.session() as session:
        lines = usage_store.usage_lines(session, tenant.id, start, end, width, deployment, limit=MAX_ROWS + 1)
        if len(lines) > MAX_ROWS:
            raise ApiError(400, f"the report would exceed {MAX_ROWS} rows: narrow the range or use a coarser by")
        totals = usage_store.usage_totals(session, tenant.id, start, end, deployment)
    rows = [UsageLinePublic(**{**vars(line), "period_start": _utc(line.period_start)}) for line in lines]
    report = UsageReport(since=_utc(start), until=_utc(end), by=by, rows=rows, totals=UsageTotalsPublic(**vars(totals)))
    if fmt == "csv":
        return Response(_csv(report), media_type="text/csv")
    return report


@router.get("/records")
def usage_records(
    tenant: TenantDep,
    db: DatabaseDep,
    platform: PlatformDep,
    limit: str | None = None,
    since: str | None = None,
    until: str | None = None,
    deployment_id: str | None = None,
) -> list[UsageRecordPublic]:
    """The newest usage records (one per executed batch) started in [since, until), newest first; `limit`
    1 to 1000 (default 100); since defaults to the epoch and until to now."""
    count = parse_int("limit", limit, 100, 1, MAX_RECORDS)
    written_so_far(platform)
    end = parse_time("until", until, time.time())
    start = parse_time("since", since, 0.0)
    deployment = parse_int("deployment_id", deployment_id, None, 1, MAX_ID)
    with db.session() as session:
        records = usage_store.recent_records(session, tenant.id, count, start, end, deployment)
        return [UsageRecordPublic.of(r) for r in records]
