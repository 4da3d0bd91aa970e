"""A compile's outcome written once: a compare-and-set on the deployment's state, `compiling` → `ready` or
`failed`. Two runs of one job can overlap (a Celery task redelivered while a worker thought dead still runs, a
gateway restart resubmitting a queued job); whichever records first wins and the other's result is discarded, so
a deployment gets one program and one result however many times its job ran."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import update
from sqlalchemy.orm import Session

from luminal.store.deployments import COMPILING, FAILED, READY
from luminal.store.tables import Deployment


def record_outcome(session: Session, deployment_id: int, program_key: str | None, error: str | None) -> bool:
    """Move a still-`compiling` deployment to its outcome; False when it was deleted or another run finished it."""
    moved = session.execute(
        update(Deployment)
        .where(Deployment.id == deployment_id, Deployment.status == COMPILING)
        .values(
            status=READY if error is None else FAILED,
            program_key=program_key,
            error=error,
            updated_at=dt.datetime.now(dt.UTC),
        )
        .execution_options(synchronize_session=False)
    )
    return moved.rowcount == 1
