"""The billing ledger in the metadata database: `usage_records`, one row per executed batch.

Exactly once rests on the database, not on the writer: `batch_id` is unique and the insert is
`ON CONFLICT (batch_id) DO NOTHING RETURNING id` (SQLite >= 3.35 and PostgreSQL), so two workers or a retry racing
on one batch leave one row, and the loser learns it from the empty RETURNING, with no error to tell apart from a real
one (such as an unknown tenant).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from luminal.gateway.store.database import Database
from luminal.gateway.store.tables import Deployment, Model, ModelVersion, UsageRecordRow
from luminal.scheduler.billing import UsageRecord

_INSERT_BY_DIALECT = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}
MAX_ID_CHARS = 64  # batch ids are uuid4 hex (32); the column holds 64


class LedgerError(ValueError):
    """The record cannot be billed as it is (malformed, unpriced GPU type, unknown tenant); nothing was written."""


def check_record(record: UsageRecord) -> None:
    """Raises LedgerError naming the first thing wrong with the record."""
    if not isinstance(record.batch_id, str) or not 0 < len(record.batch_id) <= MAX_ID_CHARS:
        raise LedgerError(f"batch_id must be 1 to {MAX_ID_CHARS} characters, got {record.batch_id!r:.80}")
    times = (record.started_at, record.ended_at)
    if not all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in times):
        raise LedgerError(f"batch {record.batch_id}: started_at and ended_at must be epoch seconds, got {times}")
    if record.ended_at < record.started_at:
        raise LedgerError(f"batch {record.batch_id} ended ({record.ended_at}) before it started ({record.started_at})")
    if not record.request_ids or len(record.request_ids) != len(record.request_rows):
        raise LedgerError(
            f"batch {record.batch_id}: {len(record.request_ids)} request ids but {len(record.request_rows)} row "
            "counts (need one per request, at least one request)"
        )
    if any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in record.request_rows):
        raise LedgerError(f"batch {record.batch_id}: request rows must be non-negative integers")


def _model_of(session: Session, deployment_id: int) -> tuple[str | None, int | None]:
    """The deployment's model name and version; (None, None) when it was deleted before its batch was billed."""
    row = session.execute(
        select(Model.name, ModelVersion.version)
        .join(ModelVersion, ModelVersion.model_id == Model.id)
        .join(Deployment, Deployment.model_version_id == ModelVersion.id)
        .where(Deployment.id == deployment_id)
    ).one_or_none()
    return (row.name, row.version) if row is not None else (None, None)


class SqlUsageLedger:
    def __init__(self, db: Database, prices_per_second: Mapping[str, float]):
        self.db = db
        self.prices_per_second = dict(prices_per_second)  # USD per GPU-second by GPU type
        dialect = db.engine.dialect.name
        if dialect not in _INSERT_BY_DIALECT:
            raise ValueError(f"the usage ledger supports SQLite and PostgreSQL, not {dialect}")
        self._insert = _INSERT_BY_DIALECT[dialect]

    def record(self, record: UsageRecord) -> bool:
        """Write the record once; False when its batch id was already recorded (nothing written then).
        Raises LedgerError when it cannot be billed."""
        return self.record_many([record])[0]

    def record_many(self, records: list[UsageRecord]) -> list[bool]:
        """Write several records in one transaction (what a busy worker's buffered ledger does); each answer as
        `record` gives it. Any record that cannot be billed fails them all, before anything is written."""
        prices = []
        for record in records:
            check_record(record)
            price = self.prices_per_second.get(record.gpu_type)
            if price is None:
                raise LedgerError(f"batch {record.batch_id}: no price for GPU type {record.gpu_type!r}")
            prices.append(price)
        table = UsageRecordRow.__table__
        try:
            with self.db.session() as session:
                inserted = []
                for record, price in zip(records, prices):
                    name, version = record.model_name, record.model_version
                    if name is None:
                        name, version = _model_of(session, record.deployment_id)
                    values = dict(
                        batch_id=record.batch_id,
                        tenant_id=record.tenant_id,
                        deployment_id=record.deployment_id,
                        model_name=name,
                        model_version=version,
                        worker_id=record.worker_id,
                        gpu_type=record.gpu_type,
                        started_at=record.started_at,
                        ended_at=record.ended_at,
                        seconds=record.seconds,
                        batch_size=record.batch_size,
                        request_ids=list(record.request_ids),
                        request_rows=list(record.request_rows),
                        price_per_second=price,
                        cost=record.seconds * price,
                    )
                    stmt = self._insert(table).values(**values).on_conflict_do_nothing(index_elements=["batch_id"])
                    # RETURNING says whether this statement inserted the row (the driver's rowcount is not reliable).
                    inserted.append(session.execute(stmt.returning(table.c.id)).first() is not None)
                return inserted
        except IntegrityError as e:  # the batch id cannot conflict (DO NOTHING), so a foreign key failed
            tenants = sorted({r.tenant_id for r in records})
            which = f"tenant {tenants[0]}" if len(tenants) == 1 else f"one of tenants {tenants}"
            raise LedgerError(f"{len(records)} batch(es): {which} does not exist") from e
