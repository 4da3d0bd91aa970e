"""The billing ledger in the metadata database: `usage_records`, one row per executed batch, and
`billed_requests`, each billed request once.

Exactly once rests on the database, not on the writer, at two levels. A batch: `batch_id` is unique and the insert
is `ON CONFLICT (batch_id) DO NOTHING RETURNING id` (SQLite >= 3.35 and PostgreSQL), so a retried write or two
writers racing on one batch leave one row. A request: a worker that died after billing its batch but before
acknowledging it leaves its requests to be reclaimed and re-run by another worker, in a new batch; the request
ids go into `billed_requests` (primary key) in the same transaction as the record, `ON CONFLICT DO NOTHING
RETURNING`, so the re-run learns which of its requests are new. Its record bills only those (their shares of
its time), and is removed again in the same transaction when there are none. On PostgreSQL a writer inserting a
request id another open transaction holds waits for it to end, so two racing runs cannot both bill a request.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from luminal.scheduler.billing import LedgerError, UsageRecord
from luminal.store.database import Database
from luminal.store.tables import BilledRequest, Deployment, Model, ModelVersion, UsageRecordRow

_INSERT_BY_DIALECT = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}
MAX_ID_CHARS = 64  # batch and request ids are uuid4 hex (32); the columns hold 64
# A deadlock (two transactions billing overlapping requests in different orders) or a dropped connection is
# retried: the transaction rolled back whole, so trying again cannot bill anything twice.
RETRY_BACKOFF_S = (0.05, 0.2, 1.0)
log = logging.getLogger(__name__)


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
    if any(not isinstance(i, str) or not 0 < len(i) <= MAX_ID_CHARS for i in record.request_ids):
        raise LedgerError(f"batch {record.batch_id}: request ids must be 1 to {MAX_ID_CHARS} characters")
    if len(set(record.request_ids)) != len(record.request_ids):
        raise LedgerError(f"batch {record.batch_id}: a request id appears twice")
    tokens = (record.prompt_tokens, record.completion_tokens)
    if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in tokens):
        raise LedgerError(f"batch {record.batch_id}: token counts must be non-negative integers, got {tokens}")
    billed = record.billed_seconds
    if billed is not None and not (
        isinstance(billed, int | float) and 0 <= billed <= record.ended_at - record.started_at
    ):
        raise LedgerError(f"batch {record.batch_id}: billed_seconds {billed!r:.40} must lie within its start and end")


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
        """Write the record once; False when it bills nothing (its batch id was recorded, or every one of its
        requests was billed before). Raises LedgerError when it cannot be billed."""
        return self.record_many([record])[0]

    def record_many(self, records: list[UsageRecord]) -> list[bool]:
        """Write several records in one transaction (what a busy worker's buffered ledger does); each answer as
        `record` gives it. Any record that cannot be billed fails them all, before anything is written."""
        prices = [self._price_of(record) for record in records]
        for pause in (*RETRY_BACKOFF_S, None):
            try:
                return self._write(records, prices)
            except OperationalError:
                if pause is None:
                    raise
                log.warning("writing %d usage record(s) failed; retrying in %g s", len(records), pause, exc_info=True)
                time.sleep(pause)
        raise AssertionError("unreachable")

    def _price_of(self, record: UsageRecord) -> float:
        check_record(record)
        price = self.prices_per_second.get(record.gpu_type)
        if price is None:
            raise LedgerError(f"batch {record.batch_id}: no price for GPU type {record.gpu_type!r}")
        return price

    def _write(self, records: list[UsageRecord], prices: list[float]) -> list[bool]:
        try:
            with self.db.session() as session:
                return self._write_all(session, records, prices)
        except IntegrityError as e:  # the ids cannot conflict (DO NOTHING), so a foreign key failed
            tenants = sorted({r.tenant_id for r in records})
            which = f"tenant {tenants[0]}" if len(tenants) == 1 else f"one of tenants {tenants}"
            raise LedgerError(f"{len(records)} batch(es): {which} does not exist") from e

    def _write_all(self, session: Session, records: list[UsageRecord], prices: list[float]) -> list[bool]:
        """All the records in two statements (a drainer's or a busy worker's hundreds, as one): the rows whose
        batch ids are new, then their requests' claims; records whose requests were all billed before are removed
        again, and those billed in part keep only their new requests. As writing them one by one in list order
        would: of two records sharing a request, the earlier bills it."""
        table = UsageRecordRow.__table__
        stmt = self._insert(table).on_conflict_do_nothing(index_elements=["batch_id"])
        rows = [self._row(session, record, price) for record, price in zip(records, prices)]
        # RETURNING says which rows this statement inserted (the driver's rowcount is not reliable); the rows as
        # parameters, so one compiled statement serves every count (SQLAlchemy makes multi-row INSERTs of them).
        inserted = dict(session.execute(stmt.returning(table.c.batch_id, table.c.id), rows).all())
        owner: dict[str, int] = {}  # each new row's batch id -> its row id, for the first record carrying it
        for record in records:
            if record.batch_id in inserted and record.batch_id not in owner:
                owner[record.batch_id] = inserted[record.batch_id]
        claimed = self._claim_requests(session, [(owner[r.batch_id], r) for r in records if r.batch_id in owner])
        billed, removed = [], []
        for record, price in zip(records, prices):
            record_id = owner.pop(record.batch_id, None)  # popped: a repeated batch id bills nothing
            new = set() if record_id is None else {rid for rid in record.request_ids if claimed.get(rid) == record_id}
            billed.append(bool(new))
            if record_id is not None and not new:  # a re-run of requests billed already: it bills nothing
                removed.append(record_id)
            elif new and len(new) < record.batch_size:  # only the requests not billed before, their shares
                self._keep_only(session, record_id, record, new, price)
        if removed:
            session.execute(delete(UsageRecordRow).where(UsageRecordRow.id.in_(removed)))
        return billed

    def _row(self, session: Session, record: UsageRecord, price: float) -> dict:
        name, version = record.model_name, record.model_version
        if name is None:
            name, version = _model_of(session, record.deployment_id)
        return dict(
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
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
        )

    def _keep_only(self, session: Session, record_id: int, record: UsageRecord, new: set[str], price: float) -> None:
        shares = record.shares()
        kept = [(rid, rows) for rid, rows in zip(record.request_ids, record.request_rows) if rid in new]
        seconds = sum(shares[rid] for rid, _ in kept)
        session.execute(
            update(UsageRecordRow)
            .where(UsageRecordRow.id == record_id)
            .values(
                request_ids=[rid for rid, _ in kept],
                request_rows=[rows for _, rows in kept],
                batch_size=len(kept),
                seconds=seconds,
                cost=seconds * price,
            )
        )

    def _claim_requests(self, session: Session, owned: list[tuple[int, UsageRecord]]) -> dict[str, int]:
        """Marks each record's requests billed by its row (`owned`: row id, record); request id -> the row that
        claimed it now, for the ids not billed before."""
        table = BilledRequest.__table__
        # Sorted: racing transactions then take the ids' locks in one order, and cannot deadlock on them. Stable,
        # so of two records here sharing a request, the earlier one's row comes first and claims it.
        rows = sorted(
            ({"request_id": rid, "usage_record_id": record_id} for record_id, r in owned for rid in r.request_ids),
            key=lambda row: row["request_id"],
        )
        if not rows:
            return {}
        stmt = self._insert(table).on_conflict_do_nothing(index_elements=["request_id"])
        return dict(session.execute(stmt.returning(table.c.request_id, table.c.usage_record_id), rows).all())
