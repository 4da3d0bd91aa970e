"""Traffic splits: the share of a model's unversioned requests each of its versions answers, set only over
versions that are ready, every change appended to the model's trail, and rolled back from it.

A split maps version -> whole percent (1..100, summing to 100). Rollback restores the split the newest change
replaced, as a new change: a second rollback undoes the first (like `kubectl rollout undo`), so rolling back
never walks further into the past than one step.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from luminal.store.deployments import READY
from luminal.store.errors import Conflict, NotFound
from luminal.store.models import get_model
from luminal.store.tables import ApiKey, Model, Tenant, TrafficChangeRow, TrafficSplitRow, utcnow

SET, ROLLBACK, CLEAR = "set", "rollback", "clear"
MAX_HISTORY = 1000  # a listing's most changes, newest first


def check_percentages(split: dict[int, int]) -> dict[int, int]:
    """`split` unchanged when it is a valid split; ValueError naming what is wrong otherwise."""
    if not split:
        raise ValueError("a split needs at least one version")
    for version, percent in split.items():
        if version < 1:
            raise ValueError(f"version {version} is not a positive integer")
        if not 1 <= percent <= 100:
            raise ValueError(
                f"version {version}: percent {percent} is outside 1..100 (leave a version out to send it none)"
            )
    total = sum(split.values())
    if total != 100:
        raise ValueError(f"the percentages sum to {total}, not 100")
    return split


@dataclass(frozen=True)
class Caller:
    """Who makes a change: the API key's id and label (None for a change made without one, e.g. by a script)."""

    api_key_id: int | None = None
    api_key_name: str | None = None

    @classmethod
    def of_key_hash(cls, session: Session, tenant: Tenant, key_hash: str) -> Caller:
        key = session.scalars(select(ApiKey).where(ApiKey.tenant_id == tenant.id, ApiKey.key_hash == key_hash)).first()
        return cls() if key is None else cls(key.id, key.name)


def version_states(model: Model) -> dict[int, str]:
    """Each version of `model` -> its deployment's status, or "not deployed"."""
    return {v.version: v.deployment.status if v.deployment else "not deployed" for v in model.versions}


def current_split(session: Session, tenant: Tenant, name: str) -> dict[int, int] | None:
    """The model's split, or None when it has none (the newest deployed version answers). NotFound: no model."""
    row = session.get(TrafficSplitRow, get_model(session, tenant, name).id)
    return None if row is None else _decoded(row.split)


def set_split(session: Session, tenant: Tenant, name: str, split: dict[int, int], caller: Caller) -> TrafficChangeRow:
    """Make `split` the model's split. NotFound: a version the model does not have; Conflict: one not ready."""
    return _change(session, tenant, name, SET, check_percentages(split), caller)


def clear_split(session: Session, tenant: Tenant, name: str, caller: Caller) -> TrafficChangeRow:
    """Remove the split: the newest deployed version answers again. Conflict when there is none."""
    return _change(session, tenant, name, CLEAR, None, caller)


def rollback(session: Session, tenant: Tenant, name: str, caller: Caller) -> TrafficChangeRow:
    """Restore the split the newest change replaced. Conflict when there is none to restore (no change yet, or the
    newest change set the first split) or one of its versions is no longer ready."""
    model = _locked_model(session, tenant, name)
    newest = session.scalars(_changes_of(model).limit(1)).first()
    if newest is None:
        raise Conflict(f"model {name!r} has no traffic split changes to roll back")
    if newest.old_split is None:
        raise Conflict(f"model {name!r} had no traffic split before its last change: nothing to roll back to")
    return _change(session, tenant, name, ROLLBACK, _decoded(newest.old_split), caller)


def history(session: Session, tenant: Tenant, name: str, limit: int = MAX_HISTORY) -> list[TrafficChangeRow]:
    """The model's changes, newest first."""
    return list(session.scalars(_changes_of(get_model(session, tenant, name)).limit(limit)))


def ready_split(session: Session, tenant: Tenant, name: str) -> dict[int, int] | None:
    """What routing reads: the split restricted to the versions ready now (a deleted or failed version drops out,
    its share going to the others in proportion), or None when the model has no split."""
    model = get_model(session, tenant, name)
    row = session.get(TrafficSplitRow, model.id)
    if row is None:
        return None
    states = version_states(model)
    return {v: p for v, p in _decoded(row.split).items() if states.get(v) == READY}


def _change(
    session: Session, tenant: Tenant, name: str, action: str, new: dict[int, int] | None, caller: Caller
) -> TrafficChangeRow:
    model = _locked_model(session, tenant, name)
    if new is not None:
        _check_ready(model, new)
    row = session.get(TrafficSplitRow, model.id)
    old = None if row is None else row.split
    if new is None:
        if row is None:
            raise Conflict(f"model {name!r} has no traffic split to clear")
        session.delete(row)
    elif row is None:
        session.add(TrafficSplitRow(model_id=model.id, tenant_id=tenant.id, split=_encoded(new)))
    else:
        row.split = _encoded(new)
        row.updated_at = utcnow()
    change = TrafficChangeRow(
        tenant_id=tenant.id,
        model_id=model.id,
        model_name=model.name,
        action=action,
        old_split=old,
        new_split=None if new is None else _encoded(new),
        api_key_id=caller.api_key_id,
        api_key_name=caller.api_key_name,
    )
    session.add(change)
    session.flush()
    return change


def _check_ready(model: Model, split: dict[int, int]) -> None:
    states = version_states(model)
    for version in sorted(split):
        state = states.get(version)
        if state is None:
            raise NotFound(f"model {model.name!r} has no version {version}")
        if state != READY:
            raise Conflict(f"model {model.name!r} version {version} cannot take traffic: it is {state}, not ready")


def _locked_model(session: Session, tenant: Tenant, name: str) -> Model:
    """The model, its row locked (PostgreSQL; SQLite serialises writers) so two concurrent changes cannot both
    record the same old split."""
    stmt = (
        select(Model)
        .where(Model.tenant_id == tenant.id, Model.name == name)
        .options(selectinload(Model.versions))
        .with_for_update(of=Model)
    )
    model = session.scalars(stmt).one_or_none()
    if model is None:
        raise NotFound(f"model {name!r} not found")
    return model


def _changes_of(model: Model):
    return select(TrafficChangeRow).where(TrafficChangeRow.model_id == model.id).order_by(TrafficChangeRow.id.desc())


def _encoded(split: dict[int, int]) -> dict[str, int]:
    return {str(v): p for v, p in sorted(split.items())}


def _decoded(split: dict[str, int]) -> dict[int, int]:
    return {int(v): int(p) for v, p in split.items()}
