"""Reading the billing ledger: usage aggregated per (period, deployment) in SQL, and the raw records for audit.

Every query is scoped to one tenant and filtered on (tenant_id, started_at), the ledger's index. A batch counts
in the period its execution started in; periods are UTC and start at multiples of their width in epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Float, func, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import ColumnElement, FunctionElement

from luminal.store.tables import UsageRecordRow

PERIOD_SECONDS = {"second": 1, "hour": 3600, "day": 86400}


class period_start(FunctionElement):
    """floor(column / width) * width: the start of the period holding each value."""

    type = Float()
    inherit_cache = True

    def __init__(self, column: ColumnElement, width: int):
        super().__init__(column)
        # A literal, not a bound parameter: PostgreSQL matches a GROUP BY to the SELECT list by text, and two
        # parameters of the same value would not match. `width` is an int from PERIOD_SECONDS, never user text.
        self.width = int(width)


@compiles(period_start)
def _period_start(element: period_start, compiler, **kw) -> str:
    column = compiler.process(list(element.clauses)[0], **kw)
    return f"floor({column} / {element.width}) * {element.width}"


@compiles(period_start, "sqlite")
def _period_start_sqlite(element: period_start, compiler, **kw) -> str:
    # SQLite has floor() only when built with its math functions; times are >= 0, where truncation is floor.
    column = compiler.process(list(element.clauses)[0], **kw)
    return f"CAST({column} / {element.width} AS INTEGER) * {element.width}"


@dataclass(frozen=True)
class UsageTotals:
    requests: int
    batches: int
    gpu_seconds: float
    cost: float
    prompt_tokens: int  # language models' sequences
    completion_tokens: int


@dataclass(frozen=True)
class UsageLine(UsageTotals):
    period_start: int  # epoch seconds
    deployment_id: int
    model: str | None  # None when the deployment was deleted before its first batch was billed
    version: int | None


def _filters(tenant_id: int, since: float, until: float, deployment_id: int | None) -> list[ColumnElement]:
    r = UsageRecordRow
    where = [r.tenant_id == tenant_id, r.started_at >= since, r.started_at < until]
    return where + ([r.deployment_id == deployment_id] if deployment_id is not None else [])


def _sums():
    r = UsageRecordRow
    return (
        func.coalesce(func.sum(r.batch_size), 0),
        func.count(r.id),
        func.coalesce(func.sum(r.seconds), 0.0),
        func.coalesce(func.sum(r.cost), 0.0),
        func.coalesce(func.sum(r.prompt_tokens), 0),
        func.coalesce(func.sum(r.completion_tokens), 0),
    )


def usage_lines(
    session: Session,
    tenant_id: int,
    since: float,
    until: float,
    width: int,
    deployment_id: int | None = None,
    limit: int | None = None,
) -> list[UsageLine]:
    """One line per (period, deployment) with any batch started in [since, until), in time order; the first
    `limit` lines when given."""
    r = UsageRecordRow
    period = period_start(r.started_at, width).label("period")
    stmt = (
        select(period, r.deployment_id, func.max(r.model_name), func.max(r.model_version), *_sums())
        .where(*_filters(tenant_id, since, until, deployment_id))
        .group_by(period, r.deployment_id)
        .order_by(period, r.deployment_id)
        .limit(limit)
    )
    return [
        UsageLine(
            period_start=int(start),
            deployment_id=dep,
            model=model,
            version=version,
            requests=int(requests),
            batches=batches,
            gpu_seconds=float(seconds),
            cost=float(cost),
            prompt_tokens=int(prompt),
            completion_tokens=int(completion),
        )
        for start, dep, model, version, requests, batches, seconds, cost, prompt, completion in session.execute(stmt)
    ]


def usage_totals(
    session: Session, tenant_id: int, since: float, until: float, deployment_id: int | None = None
) -> UsageTotals:
    requests, batches, seconds, cost, prompt, completion = session.execute(
        select(*_sums()).where(*_filters(tenant_id, since, until, deployment_id))
    ).one()
    return UsageTotals(int(requests), batches, float(seconds), float(cost), int(prompt), int(completion))


def recent_records(
    session: Session, tenant_id: int, limit: int, since: float, until: float, deployment_id: int | None = None
) -> list[UsageRecordRow]:
    """The newest `limit` records started in [since, until), newest first."""
    r = UsageRecordRow
    stmt = (
        select(r)
        .where(*_filters(tenant_id, since, until, deployment_id))
        .order_by(r.started_at.desc(), r.id.desc())
        .limit(limit)
    )
    return list(session.scalars(stmt))
