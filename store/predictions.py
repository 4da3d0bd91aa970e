"""Asynchronous predictions: created `queued`, moved to `running` by the gateway task that executes them, then
`succeeded` or `failed`. Every read a tenant makes is scoped to that tenant."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from sqlalchemy import delete, or_, select, true, update
from sqlalchemy.orm import Session

from luminal.store.errors import NotFound
from luminal.store.tables import Prediction, Tenant, utcnow

QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
UNFINISHED, FINISHED = (QUEUED, RUNNING), (SUCCEEDED, FAILED)
WEBHOOK_PENDING, WEBHOOK_DELIVERED, WEBHOOK_FAILED = "pending", "delivered", "failed"
INTERRUPTED = "interrupted by a restart"
MAX_ERROR_CHARS = 4000  # a backend's message can be a long traceback; the prediction keeps its head


@dataclass(frozen=True)
class PredictionSpec:
    tenant_id: int
    deployment_id: int
    model: str
    version: int
    webhook_url: str | None = None
    owner: str | None = None  # the gateway replica whose task runs it


@dataclass(frozen=True)
class Outcome:
    """How a prediction ended: `error` None means it succeeded, with the document in `output` or `output_key`."""

    error: str | None
    output: str | None = None
    output_key: str | None = None
    billed_seconds: float = 0.0


def create_prediction(session: Session, spec: PredictionSpec) -> Prediction:
    row = Prediction(
        id=uuid.uuid4().hex,
        tenant_id=spec.tenant_id,
        deployment_id=spec.deployment_id,
        model=spec.model,
        version=spec.version,
        status=QUEUED,
        billed_seconds=0.0,
        webhook_url=spec.webhook_url,
        webhook_status=WEBHOOK_PENDING if spec.webhook_url else None,
        owner=spec.owner,
    )
    session.add(row)
    session.flush()
    return row


def get_prediction(session: Session, tenant: Tenant, prediction_id: str) -> Prediction:
    row = session.scalars(
        select(Prediction).where(Prediction.tenant_id == tenant.id, Prediction.id == prediction_id)
    ).one_or_none()
    if row is None:
        raise NotFound(f"prediction {prediction_id!r:.80} not found")
    return row


def list_predictions(session: Session, tenant: Tenant, limit: int, before: str | None = None) -> list[Prediction]:
    """The tenant's predictions, newest first; `before` (an id from a previous page) continues after that one.
    Keyset paging, so a page never repeats or skips rows when new predictions arrive meanwhile."""
    stmt = select(Prediction).where(Prediction.tenant_id == tenant.id)
    if before is not None:
        cursor = get_prediction(session, tenant, before)
        stmt = stmt.where(
            or_(
                Prediction.created_at < cursor.created_at,
                (Prediction.created_at == cursor.created_at) & (Prediction.id < cursor.id),
            )
        )
    order = (Prediction.created_at.desc(), Prediction.id.desc())
    return list(session.scalars(stmt.order_by(*order).limit(limit)))


def mark_running(session: Session, prediction_id: str) -> None:
    session.execute(
        update(Prediction)
        .where(Prediction.id == prediction_id, Prediction.status == QUEUED)
        .values(status=RUNNING, started_at=utcnow())
    )


def finish_prediction(session: Session, prediction_id: str, outcome: Outcome) -> Prediction | None:
    """Record the outcome; None when the prediction is gone (its tenant was deleted meanwhile). A prediction a
    restart of another replica already marked interrupted still takes the result: it is the true outcome."""
    row = session.get(Prediction, prediction_id)
    if row is None:
        return None
    row.status = FAILED if outcome.error is not None else SUCCEEDED
    row.error = None if outcome.error is None else outcome.error[:MAX_ERROR_CHARS]
    row.output, row.output_key = outcome.output, outcome.output_key
    row.billed_seconds = outcome.billed_seconds
    row.started_at = row.started_at or utcnow()
    row.completed_at = utcnow()
    session.flush()
    return row


def record_webhook(session: Session, prediction_id: str, delivered: bool, error: str | None) -> None:
    session.execute(
        update(Prediction)
        .where(Prediction.id == prediction_id)
        .values(webhook_status=WEBHOOK_DELIVERED if delivered else WEBHOOK_FAILED, webhook_error=error)
    )


def fail_unfinished(session: Session, message: str, ids: list[str] | None = None) -> int:
    """Mark queued and running predictions failed with `message` (only those in `ids` when given); their inputs
    died with the process that held them. Returns how many were marked."""
    stmt = update(Prediction).where(Prediction.status.in_(UNFINISHED))
    if ids is not None:
        stmt = stmt.where(Prediction.id.in_(ids))
    now = utcnow()
    result = session.execute(stmt.values(status=FAILED, error=message, completed_at=now))
    return result.rowcount or 0


def fail_orphaned(session: Session, message: str, live_owners: set[str]) -> int:
    """Mark failed the unfinished predictions whose owner is not among `live_owners` (the gateways alive now):
    their owner died, and their inputs with it. Those with no owner predate owners (migration 0008)."""
    orphaned = or_(Prediction.owner.is_(None), Prediction.owner.not_in(live_owners)) if live_owners else true()
    stmt = update(Prediction).where(Prediction.status.in_(UNFINISHED), orphaned)
    result = session.execute(stmt.values(status=FAILED, error=message, completed_at=utcnow()))
    return result.rowcount or 0


def delete_finished_before(session: Session, cutoff: dt.datetime, limit: int) -> tuple[int, list[str]]:
    """Delete up to `limit` predictions that finished before `cutoff`, whichever tenant's; return how many, and
    the artifact keys of their stored outputs (the caller removes those nothing else uses once this commits)."""
    expired = select(Prediction.id, Prediction.output_key).where(
        Prediction.status.in_(FINISHED), Prediction.completed_at < cutoff
    )
    rows = session.execute(expired.limit(limit)).all()
    if rows:
        session.execute(delete(Prediction).where(Prediction.id.in_([r.id for r in rows])))
    return len(rows), [r.output_key for r in rows if r.output_key is not None]
