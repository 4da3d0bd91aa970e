"""The scaling decision: up on load (at once from zero), down slowly, to zero only when idle, within bounds."""

from __future__ import annotations

import pytest

from luminal.provisioner.autoscaler import Load, ScalingPolicy, desired_replicas

POLICY = ScalingPolicy(
    min_replicas=0,
    max_replicas=4,
    target_per_replica=8,
    idle_to_zero_s=60,
    scale_up_cooldown_s=5,
    scale_down_cooldown_s=30,
)
LONG_AGO = 1e9


def load(queued=0, in_flight=0, replicas=0, idle_s=0.0, since_up=LONG_AGO, since_down=LONG_AGO) -> Load:
    return Load(queued, in_flight, replicas, idle_s, since_up, since_down)


def test_cold_start_is_immediate_even_inside_the_cooldown():
    assert desired_replicas(POLICY, load(queued=1, since_up=0.0)) == 1


def test_scale_up_follows_demand_per_replica_and_stops_at_the_maximum():
    assert desired_replicas(POLICY, load(queued=17, replicas=1)) == 3  # ceil(17 / 8)
    assert desired_replicas(POLICY, load(queued=10, in_flight=7, replicas=1)) == 3
    assert desired_replicas(POLICY, load(queued=1000, replicas=1)) == 4


def test_scale_up_waits_for_its_cooldown():
    assert desired_replicas(POLICY, load(queued=40, replicas=1, since_up=1.0)) == 1
    assert desired_replicas(POLICY, load(queued=40, replicas=1, since_up=5.0)) == 4


def test_scale_down_is_one_step_after_the_cooldown_and_keeps_one_warm_until_idle():
    assert desired_replicas(POLICY, load(replicas=3, since_down=10)) == 3
    assert desired_replicas(POLICY, load(replicas=3, since_down=30)) == 2
    assert desired_replicas(POLICY, load(replicas=1, idle_s=59)) == 1
    assert desired_replicas(POLICY, load(replicas=1, idle_s=60)) == 0


def test_min_replicas_are_kept_however_idle():
    warm = ScalingPolicy(2, 4, 8, 60, 5, 30)
    assert desired_replicas(warm, load(replicas=0, idle_s=1e6)) == 2
    assert desired_replicas(warm, load(replicas=3, idle_s=1e6)) == 2


@pytest.mark.parametrize("bounds", [(2, 1), (-1, 1), (0, 0)])
def test_invalid_bounds_are_refused(bounds):
    with pytest.raises(ValueError, match="min_replicas"):
        ScalingPolicy(*bounds, 8, 60, 5, 30)
