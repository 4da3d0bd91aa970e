"""The scaling decision for one deployment, as a pure function of its load and its recent history.

- Scale up when the work waiting per replica exceeds the target, at once from zero (a cold start is the
  latency a user feels), otherwise no faster than the scale-up cooldown.
- Scale down only after the scale-down cooldown, one replica at a time, so a short lull does not throw away
  warm workers; to zero only after the deployment has been idle for `idle_to_zero_s`.
- Always within [min_replicas, max_replicas].
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ScalingPolicy:
    min_replicas: int
    max_replicas: int
    target_per_replica: float  # queued + in-flight requests one replica is expected to absorb
    idle_to_zero_s: float
    scale_up_cooldown_s: float
    scale_down_cooldown_s: float

    def __post_init__(self):
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(f"need 0 <= min_replicas <= max_replicas, max >= 1; got {self}")
        if self.target_per_replica <= 0:
            raise ValueError("target_per_replica must be positive")


@dataclass(frozen=True)
class Load:
    queued: int
    in_flight: int
    replicas: int  # running or starting
    idle_s: float  # since the last request arrived or finished (monotonic)
    since_scale_up_s: float
    since_scale_down_s: float


def desired_replicas(policy: ScalingPolicy, load: Load) -> int:
    demand = load.queued + load.in_flight
    needed = math.ceil(demand / policy.target_per_replica)
    current = load.replicas
    if needed > current:
        if current == 0 or load.since_scale_up_s >= policy.scale_up_cooldown_s:
            return _clamp(policy, needed)
        return _clamp(policy, current)
    if needed < current and load.since_scale_down_s >= policy.scale_down_cooldown_s:
        # Keep one warm worker until the deployment has been idle long enough to scale to zero.
        floor = 0 if load.idle_s >= policy.idle_to_zero_s else 1
        return _clamp(policy, max(current - 1, needed, floor))
    return _clamp(policy, current)


def _clamp(policy: ScalingPolicy, replicas: int) -> int:
    return max(policy.min_replicas, min(policy.max_replicas, replicas))
