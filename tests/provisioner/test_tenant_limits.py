"""The provisioner under a tenant's standing, with a fake worker backend and a queue whose load the test sets:
a suspended tenant's deployments keep their workers while requests admitted before the suspension are queued or
executing, then go to zero at once; resumed, they scale again; a replica quota caps the tenant's workers across
its deployments, and other tenants are untouched."""

from __future__ import annotations

import dataclasses

import pytest

from luminal.provisioner.provisioner import Provisioner, ProvisionerSettings
from luminal.provisioner.tenant_limits import TenantDeployment, TenantLimits, held_by_others, limited_replicas
from luminal.scheduler.registry import open_registry
from luminal.store.clock import ManualClock
from tests.provisioner.test_provisioner import SPEC, FakeBackend

# Scaling down waits for neither a cooldown nor idle time here, so what holds workers is the tenant's standing.
SETTINGS = ProvisionerSettings(target_per_replica=4, idle_to_zero_s=1e9, scale_up_cooldown_s=0,
                               scale_down_cooldown_s=0, refresh_s=0)  # fmt: skip


class LoadByDeployment:
    def __init__(self):
        self.queued: dict[int, int] = {}
        self.executing: dict[int, int] = {}

    def depth(self, deployment_id: int) -> int:
        return self.queued.get(deployment_id, 0)

    def in_flight(self, deployment_id: int) -> int:
        return self.executing.get(deployment_id, 0)


@pytest.fixture
def world():
    specs = [
        dataclasses.replace(SPEC, deployment_id=1, tenant_id=7, min_replicas=1),
        dataclasses.replace(SPEC, deployment_id=2, tenant_id=7, min_replicas=1),
        dataclasses.replace(SPEC, deployment_id=3, tenant_id=8, min_replicas=1),
    ]
    limits: dict[int, TenantLimits] = {}
    clock = ManualClock()
    load, backend = LoadByDeployment(), FakeBackend(clock)
    registry = open_registry(None, clock=clock)
    provisioner = Provisioner(
        lambda: list(specs), load, registry, backend, SETTINGS, clock=clock, tenant_limits=lambda: dict(limits)
    )
    return provisioner, limits, load, backend


def running(backend: FakeBackend, deployment_id: int) -> int:
    return sum(h.deployment_id == deployment_id for h in backend.running())


def test_a_suspended_tenant_drains_then_scales_to_zero_and_resumes(world):
    provisioner, limits, load, backend = world
    provisioner.tick()
    assert [running(backend, d) for d in (1, 2, 3)] == [1, 1, 1]
    load.queued[1], load.executing[2] = 6, 1  # admitted before the suspension
    limits[7] = TenantLimits(suspended=True)
    provisioner.tick()
    assert [running(backend, d) for d in (1, 2, 3)] == [2, 1, 1]  # the backlog is still served, sized as usual
    load.queued[1] = 0
    provisioner.tick()
    assert [running(backend, d) for d in (1, 2, 3)] == [0, 1, 1]  # drained: to zero at once, min_replicas or not
    load.executing[2] = 0
    provisioner.tick()
    assert [running(backend, d) for d in (1, 2, 3)] == [0, 0, 1]  # the other tenant keeps its warm worker
    del limits[7]
    provisioner.tick()
    assert [running(backend, d) for d in (1, 2, 3)] == [1, 1, 1]


def test_a_replica_quota_caps_the_tenants_workers_across_deployments(world):
    provisioner, limits, load, backend = world
    limits[7] = TenantLimits(max_replicas=3)
    load.queued.update({1: 100, 2: 100, 3: 100})
    provisioner.tick()
    assert [running(backend, d) for d in (1, 2, 3)] == [2, 1, 3]  # tenant 7: 3 in all; tenant 8: its max
    load.queued[1] = 0
    provisioner.tick()  # deployment 1 gives back what it no longer needs (down to its warm one); 2 takes it
    assert [running(backend, d) for d in (1, 2, 3)] == [1, 2, 3]
    limits[7] = TenantLimits(max_replicas=1)  # lowered below the warm replicas: the lowest id keeps its own
    provisioner.tick()
    provisioner.tick()
    assert [running(backend, d) for d in (1, 2, 3)] == [1, 0, 3]


def test_a_busy_deployment_cannot_take_another_ones_warm_replicas(world):
    provisioner, limits, load, backend = world
    limits[7] = TenantLimits(max_replicas=2)
    load.queued[1] = 100
    provisioner.tick()
    provisioner.tick()
    assert [running(backend, d) for d in (1, 2, 3)] == [1, 1, 1]


@pytest.mark.parametrize(
    "wanted,demand,others,limits,want",
    [
        (3, 5, 0, TenantLimits(), 3),
        (3, 5, 0, TenantLimits(suspended=True), 3),  # draining
        (1, 0, 0, TenantLimits(suspended=True), 0),  # drained
        (3, 5, 2, TenantLimits(max_replicas=4), 2),
        (3, 5, 6, TenantLimits(max_replicas=4), 0),  # over the quota already: never negative
    ],
)
def test_the_rule_itself(wanted, demand, others, limits, want):
    assert limited_replicas(wanted, demand, others, limits) == want


def test_warm_replicas_are_granted_in_id_order_while_the_quota_lasts():
    tenant = [TenantDeployment(1, 2, 0), TenantDeployment(2, 2, 3), TenantDeployment(3, 1, 0)]
    assert held_by_others(tenant, 3, besides=1) == 3 + 0  # 2 runs 3; 3's warm replica is past the quota
    assert held_by_others(tenant, 3, besides=2) == 2 + 0
    assert held_by_others(tenant, 10, besides=2) == 2 + 1
