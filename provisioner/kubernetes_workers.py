"""Workers on Kubernetes (`LUMINAL_WORKER_BACKEND=kubernetes`): one worker Deployment per deployment.

`KubernetesDeployments` is the cluster side (create, scale, read, remove a Deployment through the official
client, answering 404 "already gone" and 409 "already exists" as the outcomes they are). `KubernetesWorkers`
fits it under the provisioner's per-worker interface: each started worker is one replica of the Deployment, and
every start or stop writes the Deployment's replica count as the number of replicas still wanted, so a lost
write heals at the next one. Kubernetes, not the provisioner, restarts a pod that dies and picks which pod goes
on a scale-down (the probes tell it which are ready); a replica counts as ready when the Deployment's status
says that many are. Scaled to zero, the Deployment is removed: the provisioner does not tell an idle deployment
from a deleted one, and a Deployment left per deleted model would pile up.

The `kubernetes` package is imported lazily (the `kubernetes` extra).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from luminal.provisioner.backends import WorkerHandle, checked_device
from luminal.provisioner.device_offer import DeviceOffer
from luminal.provisioner.kubernetes_manifest import deployment_name, managed_selector, worker_deployment
from luminal.scheduler.registry import WorkerRegistry
from luminal.scheduler.worker import new_worker_id
from luminal.scheduler.worker_spec import WorkerSpec
from luminal.store.clock import SYSTEM_CLOCK, Clock
from luminal.store.settings import Settings

log = logging.getLogger(__name__)
NOT_FOUND, CONFLICT = 404, 409


@dataclass(frozen=True)
class Replicas:
    wanted: int  # spec.replicas
    ready: int  # status.readyReplicas (0 while the controller has not reported)


def api_client(settings: Settings) -> Any:
    """A client of the cluster this process runs in (its service account), else of the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        # Read now: the client reads KUBECONFIG once, when it is imported.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    return client.ApiClient()


class KubernetesDeployments:
    def __init__(self, settings: Settings, client: Any = None):  # client: a kubernetes.client.ApiClient
        from kubernetes import client as k8s

        self.settings, self.namespace = settings, settings.kubernetes_namespace
        self._apps = k8s.AppsV1Api(client if client is not None else api_client(settings))
        self._api_error = k8s.ApiException

    def apply(self, spec: WorkerSpec, replicas: int) -> None:
        """Create the deployment's Deployment with `replicas`, or bring an existing one to this spec and count."""
        body = worker_deployment(self.settings, spec, replicas)
        try:
            self._apps.create_namespaced_deployment(self.namespace, body)
            log.info("created Deployment %s with %d replica(s)", body["metadata"]["name"], replicas)
            return
        except self._api_error as error:
            if error.status != CONFLICT:  # 409: it exists already (an earlier provisioner, a lost answer)
                raise
        self._apps.patch_namespaced_deployment(body["metadata"]["name"], self.namespace, body)

    def scale(self, deployment_id: int, replicas: int) -> bool:
        """Set its replica count; False when it is gone (404)."""
        patch = {"spec": {"replicas": replicas}}
        try:
            self._apps.patch_namespaced_deployment(deployment_name(deployment_id), self.namespace, patch)
            return True
        except self._api_error as error:
            if error.status == NOT_FOUND:
                return False
            raise

    def replicas(self, deployment_id: int) -> Replicas | None:
        """Wanted and ready replicas as the Deployment reports them; None when it does not exist."""
        try:
            found = self._apps.read_namespaced_deployment(deployment_name(deployment_id), self.namespace)
        except self._api_error as error:
            if error.status == NOT_FOUND:
                return None
            raise
        ready = (found.status.ready_replicas if found.status is not None else None) or 0
        return Replicas(wanted=found.spec.replicas or 0, ready=ready)

    def remove(self, deployment_id: int) -> None:
        """Delete it and its pods; nothing when it is already gone (404)."""
        try:
            self._apps.delete_namespaced_deployment(
                deployment_name(deployment_id), self.namespace, propagation_policy="Foreground"
            )
            log.info("removed Deployment %s", deployment_name(deployment_id))
        except self._api_error as error:
            if error.status != NOT_FOUND:
                raise

    def deployment_ids(self) -> list[int]:
        """The deployments that have a worker Deployment this provisioner manages."""
        found = self._apps.list_namespaced_deployment(self.namespace, label_selector=managed_selector())
        labels = (item.metadata.labels or {} for item in found.items)
        return sorted(int(v) for v in (lab.get("luminal.dev/deployment", "") for lab in labels) if v.isdigit())


class _ReplicaHandle:
    """One wanted replica of a worker Deployment (not a particular pod: Kubernetes chooses those)."""

    def __init__(self, backend: KubernetesWorkers, spec: WorkerSpec, clock: Clock):
        self.worker_id, self.deployment_id, self.spec = new_worker_id(spec.deployment_id), spec.deployment_id, spec
        self.started_at = clock.monotonic()
        self._backend, self._clock = backend, clock
        self._ready_at: float | None = None
        self.stopped = False

    def alive(self) -> bool:
        """Wanted, and its Deployment still exists (deleted by hand, every replica is gone and is restarted)."""
        return not self.stopped and self._backend.status(self.deployment_id) is not None

    def cold_start_seconds(self) -> float | None:
        if self._ready_at is None and not self.stopped:
            replicas = self._backend.status(self.deployment_id)
            if replicas is not None and self._backend.ordinal(self) < replicas.ready:
                self._ready_at = self._clock.monotonic()
        return None if self._ready_at is None else self._ready_at - self.started_at

    def stop(self) -> None:
        self._backend.release(self)

    def join(self, timeout: float) -> bool:
        return True  # the pod's graceful stop is Kubernetes' (terminationGracePeriodSeconds), not ours to wait on


class KubernetesWorkers:
    def __init__(
        self,
        settings: Settings,
        deployments: KubernetesDeployments | None = None,
        clock: Clock = SYSTEM_CLOCK,
        status_ttl_s: float = 1.0,  # the provisioner asks every handle each tick: one read per Deployment serves all
        registry: WorkerRegistry | None = None,
    ):
        self.deployments = deployments if deployments is not None else KubernetesDeployments(settings)
        self.clock, self.status_ttl_s = clock, status_ttl_s
        # Pods register under their own names, which the provisioner's handles do not know, so the registry
        # entries of pods that died (replaced by Kubernetes, or removed) are dropped here once their heartbeat is
        # older than the longest batch allows: the provisioner's own rule for a hung worker.
        self.registry, self.heartbeat_timeout_s = registry, settings.execution_timeout_s + 30
        # Every priced GPU type: nodes labelled with it take its pods; with none, they stay Pending (not ready).
        self.offer = DeviceOffer(
            provider=f"the Kubernetes backend (namespace {settings.kubernetes_namespace})",
            remote_types=frozenset(settings.gpu_prices_per_second),
        )
        self._replicas: dict[int, list[_ReplicaHandle]] = {}
        self._status: dict[int, tuple[float, Replicas | None]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.prune_every_s, self._pruned_at = 60.0, float("-inf")

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        checked_device(self.offer, spec)
        handle = _ReplicaHandle(self, spec, self.clock)
        with self._lock:
            wanted = self._replicas.setdefault(spec.deployment_id, [])
            self.deployments.apply(spec, len(wanted) + 1)
            wanted.append(handle)
            self._status.pop(spec.deployment_id, None)
        return handle

    def prune(self, keep: set[int]) -> None:
        """Remove the worker Deployments of deployments not in `keep` that no replica of ours wants (left by a
        provisioner that was stopped or killed before it could scale them away); at most once per
        `prune_every_s`, as it lists every worker Deployment."""
        now = self.clock.monotonic()
        with self._lock:
            if now - self._pruned_at < self.prune_every_s:
                return
            self._pruned_at = now
            held = set(self._replicas)
        try:
            for deployment_id in self.deployments.deployment_ids():
                if deployment_id not in keep and deployment_id not in held:
                    log.info("deployment %s is no longer served: removing its worker Deployment", deployment_id)
                    self.deployments.remove(deployment_id)
        except Exception:  # tried again at the next prune
            log.exception("could not prune the worker Deployments")

    def close(self) -> None:
        """The provisioner is closing (its gateway stops): the Deployments keep their replicas and serve on, and
        the next provisioner's first start or stop writes each count again. Stops after this change nothing."""
        with self._lock:
            self._closed = True

    def release(self, handle: _ReplicaHandle) -> None:
        d = handle.deployment_id
        with self._lock:
            if handle.stopped or self._closed:
                return
            handle.stopped = True
            wanted = self._replicas.get(d, [])
            if handle in wanted:
                wanted.remove(handle)
            self._status.pop(d, None)
            try:
                if wanted:
                    self.deployments.scale(d, len(wanted))
                else:
                    self._replicas.pop(d, None)
                    self.deployments.remove(d)
            except Exception:  # the next start or stop writes the count again; a stop must not end the tick
                log.exception("could not scale the worker Deployment of deployment %s", d)

    def status(self, deployment_id: int) -> Replicas | None:
        """The Deployment's replicas, read at most once per `status_ttl_s`; None when it does not exist."""
        now = self.clock.monotonic()
        with self._lock:
            cached = self._status.get(deployment_id)
        if cached is not None and now - cached[0] < self.status_ttl_s:
            return cached[1]
        try:
            replicas = self.deployments.replicas(deployment_id)
        except Exception:  # the API server unreachable for a moment: the replicas are what they were
            log.exception("could not read the worker Deployment of deployment %s", deployment_id)
            return (
                cached[1]
                if cached is not None
                else Replicas(wanted=len(self._replicas.get(deployment_id, [])), ready=0)
            )
        with self._lock:
            self._status[deployment_id] = (now, replicas)
        self._forget_dead_pods(deployment_id)
        return replicas

    def _forget_dead_pods(self, deployment_id: int) -> None:
        if self.registry is None:
            return
        for info in self.registry.dead(self.heartbeat_timeout_s):
            if info.deployment_id == deployment_id:
                log.warning("worker pod %s of deployment %s stopped heartbeating: forgotten", info.worker_id,
                            deployment_id)  # fmt: skip
                self.registry.deregister(info.worker_id)

    def ordinal(self, handle: _ReplicaHandle) -> int:
        """Its place among the deployment's wanted replicas, oldest first (the first `ready` of them count)."""
        with self._lock:
            wanted = self._replicas.get(handle.deployment_id, [])
            return wanted.index(handle) if handle in wanted else len(wanted)
