"""What a tenant's standing does to the replicas the autoscaler wants for one of its deployments.

- Suspended: the deployment drains. Workers stay while requests admitted before the suspension are queued or
  executing (the autoscaler sizes them as usual), and the deployment goes to zero as soon as it has none, without
  waiting for the idle time or a cooldown: nothing new can arrive.
- A replica quota caps the tenant's workers across all its deployments: a deployment gets what the quota leaves
  after what the tenant's other deployments hold, which is their running workers and at least their warm
  replicas (min_replicas), so a busy deployment cannot starve another's warm workers. The scaling API keeps the
  warm replicas within the quota; should an operator lower it below them, the deployments with the lowest ids
  keep theirs, so the shares always add up to the quota and never deadlock at zero.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TenantLimits:
    suspended: bool = False
    max_replicas: int | None = None  # across all the tenant's deployments; None: no quota


UNLIMITED = TenantLimits()


@dataclass(frozen=True)
class TenantDeployment:
    deployment_id: int
    min_replicas: int
    running: int


def held_by_others(deployments: list[TenantDeployment], quota: int, besides: int) -> int:
    """What the tenant's deployments other than `besides` hold against its replica `quota`; `deployments` are all
    of the tenant's, ordered by id (warm replicas are granted in that order while the quota lasts)."""
    held, warm_left = 0, quota
    for d in deployments:
        warm = min(d.min_replicas, warm_left)
        warm_left -= warm
        if d.deployment_id != besides:
            held += max(warm, d.running)
    return held


def limited_replicas(wanted: int, demand: int, others: int, limits: TenantLimits) -> int:
    """`wanted` (the autoscaler's choice) within the tenant's limits; `demand` is the deployment's queued and
    executing requests, `others` the tenant's workers on its other deployments."""
    if limits.suspended and demand == 0:
        return 0
    if limits.max_replicas is not None:
        return max(0, min(wanted, limits.max_replicas - others))
    return wanted
