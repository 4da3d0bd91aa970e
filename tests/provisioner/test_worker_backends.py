"""`LUMINAL_WORKER_BACKEND` picks the backend; remote ones refuse a queue or database other machines cannot
reach. The provisioner's own loop drives the Kubernetes backend (found through a kubeconfig, as an operator's
would be) against kmock's emulator: a worker Deployment follows the queue up, down, and away at zero."""

from __future__ import annotations

import dataclasses

import pytest

from luminal.provisioner.kubernetes_workers import KubernetesWorkers
from luminal.provisioner.provisioner import Provisioner, ProvisionerSettings
from luminal.provisioner.worker_backends import open_worker_backend
from luminal.scheduler.registry import MemoryRegistry
from luminal.store.clock import ManualClock
from luminal.store.settings import Settings
from tests.provisioner.kubernetes_emulator import running_emulator
from tests.provisioner.test_provisioner import SPEC, FakeQueue

pytest.importorskip("kubernetes")
SHARED = {"queue_url": "redis://127.0.0.1:6379/0", "database_url": "postgresql+psycopg://u@db/luminal"}


@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        ({"worker_backend": "kubernetes", "database_url": SHARED["database_url"]}, "LUMINAL_QUEUE_URL=redis"),
        ({"worker_backend": "ec2", "queue_url": SHARED["queue_url"]}, "LUMINAL_DATABASE_URL=postgresql"),
        ({"worker_backend": "ec2", **SHARED}, "LUMINAL_EC2_AMI_ID"),
        ({"worker_backend": "process"}, "LUMINAL_QUEUE_URL=redis"),
    ],
)
def test_remote_backends_refuse_what_other_machines_cannot_reach(tmp_path, fields, refusal):
    with pytest.raises(ValueError, match=refusal):
        open_worker_backend(Settings(data_dir=tmp_path, **fields), MemoryRegistry())


def test_the_provisioner_scales_a_worker_deployment(tmp_path, monkeypatch):
    with running_emulator() as emulator:
        monkeypatch.setenv("KUBECONFIG", str(emulator.kubeconfig(tmp_path / "kubeconfig")))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod: the kubeconfig is used
        settings = Settings(data_dir=tmp_path, worker_backend="kubernetes", kubernetes_namespace="scale", **SHARED)
        backend = open_worker_backend(settings, MemoryRegistry())
        assert isinstance(backend, KubernetesWorkers)
        clock, queue = ManualClock(), FakeQueue()
        spec = dataclasses.replace(SPEC, deployment_id=21, gpu_type="l4")
        scaling = ProvisionerSettings(target_per_replica=4, idle_to_zero_s=1, scale_up_cooldown_s=0,
                                      scale_down_cooldown_s=0, refresh_s=0)  # fmt: skip
        provisioner = Provisioner(lambda: [spec], queue, MemoryRegistry(clock), backend, scaling, clock)
        deployments = backend.deployments

        provisioner.tick()
        assert deployments.replicas(21) is None  # min 0, idle: no Deployment at all
        queue.queued = 10
        provisioner.tick()
        assert deployments.replicas(21).wanted == 3  # ceil(10 / 4), max 3
        assert provisioner.status(21)["replicas"] == 3
        queue.queued = 4
        for wanted in (2, 1):  # one step per tick
            clock.advance(1)
            provisioner.tick()
            assert deployments.replicas(21).wanted == wanted
        queue.queued = 0
        clock.advance(2)
        provisioner.tick()
        clock.advance(backend.status_ttl_s)
        assert deployments.replicas(21) is None  # idle past idle_to_zero_s: scaled to zero, removed
        assert provisioner.status(21)["replicas"] == 0

        queue.queued = 8
        clock.advance(1)
        provisioner.tick()
        assert deployments.replicas(21).wanted == 2
        provisioner.close()  # the gateway stops: its workers serve on
        assert deployments.replicas(21).wanted == 2
        successor = Provisioner(
            lambda: [spec], queue, MemoryRegistry(clock), KubernetesWorkers(settings), scaling, clock
        )
        successor.tick()  # adopts the Deployment (409) with its own count
        assert deployments.replicas(21).wanted == 2
        deployments.remove(21)
