"""The Kubernetes backend against kmock's API emulator over real HTTP, through the official client; every
Deployment it creates, and every state a patch leaves, is validated against Kubernetes' own schemas."""

from __future__ import annotations

import dataclasses

import pytest

from luminal.provisioner.kubernetes_manifest import deployment_name, worker_deployment
from luminal.provisioner.kubernetes_workers import KubernetesDeployments, KubernetesWorkers, Replicas
from luminal.scheduler.registry import MemoryRegistry, WorkerInfo
from luminal.store.clock import ManualClock
from luminal.store.settings import Settings
from tests.provisioner.gateway_settings import assert_worker_reads_the_gateways_settings, gateway_settings
from tests.provisioner.kubernetes_emulator import running_emulator, validate
from tests.provisioner.test_provisioner import SPEC

pytest.importorskip("kubernetes")
pytest.importorskip("kubernetes_validate")

H100 = dataclasses.replace(SPEC, deployment_id=7, gpu_type="h100")
NAMESPACE = "luminal-test"


@pytest.fixture(scope="module")
def emulator():
    with running_emulator() as emulator:
        yield emulator


@pytest.fixture
def settings() -> Settings:
    return Settings(kubernetes_namespace=NAMESPACE, worker_image="registry.example/luminal-cloud:1.2",
                    gpu_worker_image="registry.example/luminal-cloud-cuda-worker:1.2")  # fmt: skip


@pytest.fixture
def deployments(emulator, settings) -> KubernetesDeployments:
    return KubernetesDeployments(settings, emulator.client())


def sent(emulator, method: str) -> list[dict]:
    return [r.data for r in emulator.emulator if str(r.method).upper().endswith(method) and r.data]


def stored(deployments: KubernetesDeployments, deployment_id: int) -> dict:
    """The Deployment as the emulator holds it, read back through the client, validated."""
    apps = deployments._apps
    found = apps.api_client.sanitize_for_serialization(
        apps.read_namespaced_deployment(deployment_name(deployment_id), NAMESPACE)
    )
    found.pop("status", None)
    validate(found)
    return found


def report_ready(emulator, deployment_id: int, ready: int) -> None:
    """What the Deployment controller would write; the emulator has none."""
    from kubernetes import client

    status = {"status": {"replicas": ready, "readyReplicas": ready}}
    client.AppsV1Api(emulator.client()).patch_namespaced_deployment_status(
        deployment_name(deployment_id), NAMESPACE, status
    )


def test_manifests_validate_for_every_gpu_type(settings):
    for gpu_type in settings.gpu_prices_per_second:
        manifest = worker_deployment(settings, dataclasses.replace(H100, gpu_type=gpu_type), 2)
        validate(manifest)
        (container,) = manifest["spec"]["template"]["spec"]["containers"]
        # CPU deployments run in the platform's image, GPU ones in the CUDA worker's (deploy/docker/).
        want = settings.worker_image if gpu_type == "cpu" else settings.gpu_worker_image
        assert container["image"] == want, gpu_type


def test_pods_run_with_the_gateways_settings(settings, monkeypatch):
    """Reclaiming a dead worker's requests as the gateway says among them (not after the default 30 s)."""
    manifest = worker_deployment(gateway_settings(settings), H100, 1)
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    env = {variable["name"]: variable["value"] for variable in container["env"] if "value" in variable}
    assert_worker_reads_the_gateways_settings(env, monkeypatch)


def test_a_gpu_worker_deployment_requests_its_gpu_on_nodes_of_its_type(emulator, deployments, settings):
    deployments.apply(H100, 2)
    created = sent(emulator, "POST")[-1]
    validate(created)
    assert created["metadata"]["name"] == "luminal-worker-d7"
    labels = created["metadata"]["labels"]
    assert labels["luminal.dev/deployment"] == "7" and labels["app.kubernetes.io/managed-by"] == "luminal-provisioner"
    assert {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/part-of"} <= labels.keys()
    pod = created["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {"luminal.dev/gpu-type": "h100"}
    assert container["image"] == "registry.example/luminal-cloud-cuda-worker:1.2"  # the image with CuPy
    assert container["command"] + container["args"] == [
        "python", "-m", "luminal.scheduler.worker_process", "7", "$(POD_NAME)", "h100"
    ]  # fmt: skip
    assert container["envFrom"] == [{"secretRef": {"name": "luminal-worker-env"}}]
    # Credentials come from the Secret only: nothing in the Deployment names a URL.
    assert "redis://" not in str(created) and "postgresql" not in str(created)
    assert {"readinessProbe", "livenessProbe", "startupProbe"} <= container.keys()
    assert deployments.replicas(7) == Replicas(wanted=2, ready=0)
    deployments.remove(7)


def test_create_scale_read_remove_survive_409_and_404(emulator, deployments):
    spec = dataclasses.replace(SPEC, deployment_id=8)
    assert deployments.replicas(8) is None and deployments.scale(8, 3) is False  # not there: 404 is no error
    deployments.apply(spec, 1)
    deployments.apply(spec, 2)  # exists: 409, then brought to the count
    assert stored(deployments, 8)["spec"]["replicas"] == 2
    assert deployments.scale(8, 3) is True
    report_ready(emulator, 8, 3)
    assert deployments.replicas(8) == Replicas(wanted=3, ready=3)
    assert 8 in deployments.deployment_ids()
    deployments.remove(8)
    deployments.remove(8)  # already gone: 404 is no error
    assert deployments.replicas(8) is None


def test_a_changed_program_rolls_the_pods_over(deployments):
    spec = dataclasses.replace(SPEC, deployment_id=9)
    deployments.apply(spec, 1)
    before = stored(deployments, 9)["spec"]["template"]["metadata"]["annotations"]
    deployments.apply(dataclasses.replace(spec, program_key="other"), 1)
    after = stored(deployments, 9)["spec"]["template"]["metadata"]["annotations"]
    assert before != after
    deployments.remove(9)


def test_workers_are_replicas_of_one_deployment(emulator, deployments, settings):
    clock = ManualClock()
    backend = KubernetesWorkers(settings, deployments, clock)
    first, second = backend.start(H100), backend.start(H100)
    assert deployments.replicas(7).wanted == 2
    assert first.alive() and second.alive()
    assert first.cold_start_seconds() is None
    clock.advance(5)
    report_ready(emulator, 7, 1)
    clock.advance(backend.status_ttl_s)
    assert first.cold_start_seconds() == 5 + backend.status_ttl_s  # the oldest wanted replica counts ready first
    assert second.cold_start_seconds() is None
    second.stop()
    assert not second.alive() and deployments.replicas(7).wanted == 1
    first.stop()
    first.stop()  # twice: once
    assert deployments.replicas(7) is None  # scaled to zero: removed
    third = backend.start(H100)  # and created again
    assert deployments.replicas(7).wanted == 1
    deployments.remove(7)  # deleted by hand: its replicas are gone, so the provisioner starts others
    clock.advance(backend.status_ttl_s)
    assert not third.alive()
    third.stop()  # the Deployment is already gone: 404 is no error
    for body in sent(emulator, "POST"):
        validate(body)


def test_a_gpu_type_with_a_bad_label_value_is_refused(settings):
    with pytest.raises(ValueError, match="label value"):
        worker_deployment(settings, dataclasses.replace(H100, gpu_type="h100; rm -rf /"), 1)


def test_registry_entries_of_dead_pods_are_forgotten(deployments, settings):
    clock = ManualClock()
    registry = MemoryRegistry(clock)
    backend = KubernetesWorkers(settings, deployments, clock, registry=registry)
    handle = backend.start(H100)
    for pod in ("luminal-worker-d7-aaa", "luminal-worker-d7-bbb"):
        registry.register(WorkerInfo(pod, 7, pid=1, host=pod, device="h100", started_at=clock.time()))
    registry.register(WorkerInfo("luminal-worker-d8-ccc", 8, pid=1, host="x", device="cpu", started_at=clock.time()))
    clock.advance(backend.heartbeat_timeout_s + 1)
    registry.heartbeat("luminal-worker-d7-bbb")  # alive
    assert handle.alive()  # refreshes the Deployment's status, and forgets the dead pod of this deployment
    assert {w.worker_id for w in registry.workers()} == {"luminal-worker-d7-bbb", "luminal-worker-d8-ccc"}
    handle.stop()


def test_worker_deployments_of_deployments_no_longer_served_are_pruned(deployments, settings):
    clock = ManualClock()
    backend = KubernetesWorkers(settings, deployments, clock)
    deployments.apply(dataclasses.replace(SPEC, deployment_id=30), 2)  # left by a killed provisioner
    deployments.apply(dataclasses.replace(SPEC, deployment_id=31), 1)  # still served: the next start adopts it
    held = backend.start(dataclasses.replace(SPEC, deployment_id=32))  # ours
    backend.prune({31})
    assert deployments.replicas(30) is None
    assert deployments.replicas(31) is not None and deployments.replicas(32) is not None
    deployments.apply(dataclasses.replace(SPEC, deployment_id=30), 1)
    backend.prune({31})
    assert deployments.replicas(30) is not None  # once per prune_every_s: it lists every Deployment
    clock.advance(backend.prune_every_s)
    backend.prune({31})
    assert deployments.replicas(30) is None
    held.stop()
    deployments.remove(31)
