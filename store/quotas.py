"""A tenant's count quotas (deployments, and replicas across its deployments), checked where deployments are
created and scaled. The tenant's row is read afresh and locked, so the quota is the current one (the caller's
tenant may come from a cache) and two concurrent requests cannot both take the last slot."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from luminal.store.errors import QuotaExceeded
from luminal.store.tables import Deployment, Tenant

_HOW_TO_FREE = "delete one, or ask an administrator to raise the quota"


def _locked_tenant(session: Session, tenant_id: int) -> Tenant:
    return session.scalars(select(Tenant).where(Tenant.id == tenant_id).with_for_update()).one()


def check_new_deployment(session: Session, tenant_id: int, min_replicas: int, max_replicas: int) -> None:
    """QuotaExceeded when one more deployment with these replica bounds would pass a quota."""
    tenant = _locked_tenant(session, tenant_id)
    if tenant.max_deployments is not None:
        count = session.scalar(select(func.count()).where(Deployment.tenant_id == tenant_id)) or 0
        if count >= tenant.max_deployments:
            raise QuotaExceeded(
                f"this tenant's quota is {tenant.max_deployments} deployment(s) and it has {count}: {_HOW_TO_FREE}"
            )
    _check_replicas(session, tenant, None, min_replicas, max_replicas)


def check_scaling(session: Session, tenant_id: int, deployment_id: int, min_replicas: int, max_replicas: int) -> None:
    """QuotaExceeded when deployment `deployment_id` with these replica bounds would pass the replica quota."""
    _check_replicas(session, _locked_tenant(session, tenant_id), deployment_id, min_replicas, max_replicas)


def _check_replicas(session: Session, tenant: Tenant, deployment_id: int | None, low: int, high: int) -> None:
    quota = tenant.max_replicas
    if quota is None:
        return
    if high > quota:
        raise QuotaExceeded(f"max_replicas {high} exceeds this tenant's quota of {quota} replica(s)")
    # Warm replicas (min_replicas) run whatever the load, so together they must fit; max_replicas may overlap,
    # the provisioner shares the quota between the deployments that scale up at run time.
    others = select(func.coalesce(func.sum(Deployment.min_replicas), 0)).where(Deployment.tenant_id == tenant.id)
    if deployment_id is not None:
        others = others.where(Deployment.id != deployment_id)
    warm = (session.scalar(others) or 0) + low
    if warm > quota:
        raise QuotaExceeded(
            f"min_replicas {low} would keep {warm} replica(s) warm across this tenant's deployments, over its "
            f"quota of {quota}: lower min_replicas elsewhere, or ask an administrator to raise the quota"
        )
