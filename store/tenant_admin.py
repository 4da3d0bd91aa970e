"""What an operator does to tenants through the admin API: open one with its first key, list them with what
they hold, suspend and resume one, set its quotas. What a tenant does to itself (its keys) is in tenants.py."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from luminal.store.errors import Conflict, NotFound
from luminal.store.tables import ApiKey, Deployment, Tenant
from luminal.store.tenants import create_key

QUOTA_FIELDS = ("max_deployments", "max_replicas", "max_requests_per_second")


@dataclass(frozen=True)
class TenantSummary:
    tenant: Tenant
    deployments: int
    active_keys: int


def open_tenant(session: Session, name: str, quotas: dict[str, float | None]) -> tuple[TenantSummary, str]:
    """A new tenant with `quotas` and one API key; returns the key itself, the only time it is available."""
    if session.scalars(select(Tenant.id).where(Tenant.name == name)).first() is not None:
        raise Conflict(f"a tenant named {name!r} already exists")
    tenant = Tenant(name=name, **_checked(quotas))
    session.add(tenant)
    try:
        session.flush()
    except IntegrityError:  # created by a concurrent request since the check above
        raise Conflict(f"a tenant named {name!r} already exists") from None
    _, key = create_key(session, tenant)
    return TenantSummary(tenant, deployments=0, active_keys=1), key


def _summaries(session: Session, tenant_id: int | None = None) -> list[TenantSummary]:
    """Every tenant (or the one `tenant_id`) with its deployments and active keys counted, by id."""
    deployments = select(func.count()).where(Deployment.tenant_id == Tenant.id).correlate(Tenant).scalar_subquery()
    keys = (
        select(func.count())
        .where(ApiKey.tenant_id == Tenant.id, ApiKey.revoked_at.is_(None))
        .correlate(Tenant)
        .scalar_subquery()
    )
    stmt = select(Tenant, deployments, keys).order_by(Tenant.id)
    if tenant_id is not None:
        stmt = stmt.where(Tenant.id == tenant_id)
    rows = session.execute(stmt)
    return [TenantSummary(t, d, k) for t, d, k in rows]


def list_tenants(session: Session) -> list[TenantSummary]:
    return _summaries(session)


def get_tenant(session: Session, tenant_id: int) -> TenantSummary:
    found = _summaries(session, tenant_id)
    if not found:
        raise NotFound(f"tenant {tenant_id} not found")
    return found[0]


def _locked(session: Session, tenant_id: int) -> Tenant:
    tenant = session.scalars(select(Tenant).where(Tenant.id == tenant_id).with_for_update()).one_or_none()
    if tenant is None:
        raise NotFound(f"tenant {tenant_id} not found")
    return tenant


def suspend_tenant(session: Session, tenant_id: int, reason: str | None) -> TenantSummary:
    tenant = _locked(session, tenant_id)
    if tenant.suspended_at is not None:
        raise Conflict(f"tenant {tenant_id} is already suspended (since {tenant.suspended_at.isoformat()})")
    tenant.suspended_at, tenant.suspension_reason = dt.datetime.now(dt.UTC), reason
    session.flush()
    return get_tenant(session, tenant_id)


def resume_tenant(session: Session, tenant_id: int) -> TenantSummary:
    tenant = _locked(session, tenant_id)
    if tenant.suspended_at is None:
        raise Conflict(f"tenant {tenant_id} is not suspended")
    tenant.suspended_at, tenant.suspension_reason = None, None
    session.flush()
    return get_tenant(session, tenant_id)


def set_quotas(session: Session, tenant_id: int, changes: dict[str, float | None]) -> TenantSummary:
    """Apply quota `changes` (None lifts a quota). Lowering one below what the tenant holds refuses only what
    comes next (a new deployment, a scale-up, a request): nothing it has is taken away."""
    tenant = _locked(session, tenant_id)
    for field, value in _checked(changes).items():
        setattr(tenant, field, value)
    session.flush()
    return get_tenant(session, tenant_id)


def constrained_tenants(session: Session) -> list[Tenant]:
    """Tenants whose workers the provisioner must limit: suspended ones, and those with a replica quota."""
    stmt = select(Tenant).where(or_(Tenant.suspended_at.is_not(None), Tenant.max_replicas.is_not(None)))
    return list(session.scalars(stmt))


def _checked(quotas: dict[str, float | None]) -> dict[str, float | None]:
    unknown = sorted(set(quotas) - set(QUOTA_FIELDS))
    if unknown:
        raise ValueError(f"not a quota: {unknown}")  # a caller's bug: the schemas admit only these
    return quotas
