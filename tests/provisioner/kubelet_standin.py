"""A node for kmock's emulator: what the Deployment controller and a kubelet do for the worker Deployments the
Kubernetes backend creates, with each pod's container run as a local process (container_standin.py).

Each step reads the namespace's worker Deployments and, for each: keeps `spec.replicas` pods of its current pod
template (a changed template replaces them all), starts each container with exactly the template's command and
args ($(VAR) references expanded from the container's environment) and environment (the image's, then the keys of
the Secret `envFrom` names, then `env` with `fieldRef`s resolved), restarts a container that exited in place
(same pod, same name: `restartPolicy: Always`, with the kubelet's crash-loop back-off), stops the newest pods
beyond the count (SIGTERM, SIGKILL after `terminationGracePeriodSeconds`), runs the readiness probe, and writes
`status.replicas` and `status.readyReplicas` back. A Deployment that is gone has its pods stopped. A test deletes a
pod as `kubectl delete pod` or an eviction does (`delete_pod`): it stops as a pod beyond the count does, and its
ReplicaSet replaces it under a new name (so a new POD_NAME), unlike a restart in place.

Probes run every `periodSeconds` once a pod is ready, and every `unready_probe_s` before (a test's knob: a real
kubelet waits the full period, seconds a test need not spend).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luminal.provisioner.kubernetes_manifest import managed_selector
from tests.provisioner.container_standin import Container, NodeLoop

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\$")
_MANAGED = dict(part.split("=", 1) for part in managed_selector().split(","))
FIRST_BACKOFF_S, MAX_BACKOFF_S = 10.0, 300.0  # the kubelet's crash-loop back-off (the first restart is at once)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a defined variable is replaced, an undefined reference is kept, $$ is $."""

    def one(found: re.Match) -> str:
        if found.group(0) == "$$":
            return "$"
        return env.get(found.group(1), found.group(0))

    return _REFERENCE.sub(one, text)


@dataclass
class Pod:
    name: str
    template_hash: str
    container: Container
    probe: list[str] | None
    probe_period_s: float
    grace_s: float
    ready: bool = False
    stopping: bool = False  # deleted, or beyond the count: never restarted (a test may delete it mid-step)
    restarts: int = 0
    exited_at: float | None = None
    _probing: subprocess.Popen | None = None
    _probe_at: float = 0.0


class KubeletStandIn(NodeLoop):
    # Each step is a list call the emulator answers (at 0.1 s, most of the emulator's CPU): a tighter loop buys the
    # tests little wall time, since a worker loads for seconds, and costs the suite's 2 cores.
    def __init__(self, api_client: Any, namespace: str, image_env: dict[str, str], root: Path,
                 unready_probe_s: float = 0.5, poll_s: float = 0.25):  # fmt: skip
        from kubernetes import client

        super().__init__("kubelet-standin", poll_s)
        self._api = api_client
        self._apps, self._core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
        self.namespace, self.image_env, self.root = namespace, image_env, root
        self.unready_probe_s = unready_probe_s
        self.pods: dict[str, list[Pod]] = {}  # by Deployment name, oldest first
        self.terminating: list[Pod] = []
        self._lock = threading.Lock()

    def take_all(self) -> list[Container]:
        with self._lock:
            every = [pod for pods in self.pods.values() for pod in pods] + self.terminating
            self.pods, self.terminating = {}, []
        return [pod.container for pod in every]

    # --- what a test looks at ---
    def workers(self) -> dict[str, Container]:
        """The running containers of every pod, by pod name (the worker id its container is given)."""
        with self._lock:
            return {pod.name: pod.container for pods in self.pods.values() for pod in pods if pod.container.running()}

    def report(self, worker_id: str) -> str:
        """A pod's name is its worker's id."""
        with self._lock:
            found = [pod for pods in self.pods.values() for pod in pods if pod.name == worker_id]
            found += [pod for pod in self.terminating if pod.name == worker_id]
        lines = [f"pod {pod.name} (stopping {pod.stopping}, restarts {pod.restarts}, exited at {pod.exited_at}): "
                 f"{pod.container.describe()}" for pod in found]  # fmt: skip
        return "\n".join([*(lines or [f"no pod is named {worker_id}"]), self._errors()])

    def delete_pod(self, name: str, grace_s: float | None = None) -> Container:
        """Delete the running pod `name`: SIGTERM now, SIGKILL once `grace_s` (None: the pod's
        terminationGracePeriodSeconds) has passed; 0: a forced deletion, SIGKILL at once. The next step
        makes its replacement, as its ReplicaSet would at once (a terminating pod no longer counts). Returns the
        deleted pod's container, which a test watches stop."""
        with self._lock:
            pods = next((pods for pods in self.pods.values() if any(pod.name == name for pod in pods)), None)
            if pods is None:
                raise KeyError(f"no pod {name!r} runs on this node")
            (pod,) = [pod for pod in pods if pod.name == name]
            pods.remove(pod)
            if grace_s is not None:
                pod.grace_s = grace_s
            if grace_s == 0:  # not SIGTERM first: told to stop, its worker would drain what the test needs cut
                pod.container.kill()
            self._terminate([pod])
        return pod.container

    def all_stopped(self) -> bool:
        with self._lock:
            every = [pod for pods in self.pods.values() for pod in pods] + self.terminating
        return not any(pod.container.running() for pod in every)

    # --- one reconcile of every worker Deployment ---
    def step(self) -> None:
        found = self._apps.list_namespaced_deployment(self.namespace, label_selector=managed_selector()).items
        names = set()
        for deployment in found:
            if not _MANAGED.items() <= (deployment.metadata.labels or {}).items():
                continue  # the emulator ignores label selectors: a node of its own picks the worker Deployments
            names.add(deployment.metadata.name)
            self._reconcile(self._api.sanitize_for_serialization(deployment))
        with self._lock:
            for gone in set(self.pods) - names:
                self._terminate(self.pods.pop(gone))
            for pod in self.terminating:
                pod.container.enforce_grace(pod.grace_s)
            self.terminating = [pod for pod in self.terminating if pod.container.running()]

    def _reconcile(self, deployment: dict) -> None:
        name, spec = deployment["metadata"]["name"], deployment["spec"]
        template = spec["template"]
        template_hash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        with self._lock:
            pods = self.pods.setdefault(name, [])
            stale = [pod for pod in pods if pod.template_hash != template_hash]
            self._terminate(stale)
            pods[:] = [pod for pod in pods if pod.template_hash == template_hash]
            wanted = spec.get("replicas", 1)
            if len(pods) > wanted:
                self._terminate(pods[wanted:])  # the youngest go (a ReplicaSet takes unready ones even before those)
                del pods[wanted:]
        while len(self.pods[name]) < wanted:
            pod = self._create_pod(name, template, template_hash)
            with self._lock:
                self.pods[name].append(pod)
        for pod in list(self.pods[name]):
            self._restart_if_exited(pod)
            self._probe(pod)
        ready = sum(pod.ready for pod in self.pods[name])
        status = {"replicas": len(self.pods[name]), "readyReplicas": ready}
        written = deployment.get("status") or {}
        if {key: written.get(key, 0) for key in status} != status:  # written when it differs, as the controller does
            self._apps.patch_namespaced_deployment_status(name, self.namespace, {"status": status})

    def _terminate(self, pods: list[Pod]) -> None:
        for pod in pods:
            pod.ready, pod.stopping = False, True
            pod.container.stop()
            self.terminating.append(pod)

    def _create_pod(self, deployment: str, template: dict, template_hash: str) -> Pod:
        pod_spec = template["spec"]
        (container,) = pod_spec["containers"]  # the backend's pods have one container
        name = self._new_pod_name(f"{deployment}-{template_hash}")
        env = self._environment(container, name)
        argv = [expand(part, env) for part in [*container.get("command", []), *container.get("args", [])]]
        volumes = {volume["name"] for volume in pod_spec.get("volumes", []) if "emptyDir" in volume}
        mounts = {}
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in volumes:
                raise ValueError(f"pod {name}: volume {mount['name']!r} is not an emptyDir this node can make")
            mounts[mount["mountPath"]] = self.root / name / "volumes" / mount["name"]
        (self.root / name).mkdir(parents=True, exist_ok=True)
        running = Container(argv, env, mounts, self.root / name / "container.log")
        running.start()
        probe = container.get("readinessProbe") or {"exec": {"command": None}, "periodSeconds": 10}
        grace_s = pod_spec.get("terminationGracePeriodSeconds", 30)
        pod = Pod(name, template_hash, running, probe["exec"]["command"], probe["periodSeconds"], grace_s)
        return pod

    def _new_pod_name(self, prefix: str) -> str:
        """A ReplicaSet's pod name: its prefix and a random suffix, never one of a pod this node still holds."""
        with self._lock:
            taken = {pod.name for pods in self.pods.values() for pod in pods} | {pod.name for pod in self.terminating}
        while (name := f"{prefix}-{secrets.token_hex(3)[:5]}") in taken:
            pass
        return name

    def _environment(self, container: dict, pod_name: str) -> dict[str, str]:
        env = dict(self.image_env)
        for source in container.get("envFrom", []):
            if "secretRef" not in source:
                raise ValueError(f"envFrom {source} is not a Secret this node reads")
            secret = self._core.read_namespaced_secret(source["secretRef"]["name"], self.namespace)
            env.update({k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()})
        fields = {"metadata.name": pod_name, "metadata.namespace": self.namespace}
        for variable in container.get("env", []):
            if "value" in variable:
                env[variable["name"]] = expand(variable["value"], env)
            elif "fieldRef" in variable.get("valueFrom", {}):
                env[variable["name"]] = fields[variable["valueFrom"]["fieldRef"]["fieldPath"]]
            else:
                raise ValueError(f"env {variable['name']}: {variable.get('valueFrom')} is not a source this node has")
        env["HOSTNAME"] = pod_name
        return env

    def _restart_if_exited(self, pod: Pod) -> None:
        """restartPolicy Always: the same pod's container starts again, at once the first time, then after the
        crash-loop back-off."""
        if pod.container.running() or pod.stopping:
            return
        now = time.monotonic()
        if pod.exited_at is None:
            pod.exited_at, pod.ready = now, False
        backoff = 0.0 if pod.restarts == 0 else min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (pod.restarts - 1))
        if now - pod.exited_at >= backoff:
            pod.container.start()
            pod.restarts, pod.exited_at = pod.restarts + 1, None

    def _probe(self, pod: Pod) -> None:
        if pod.probe is None:
            pod.ready = pod.container.running()
            return
        if pod._probing is not None:
            code = pod._probing.poll()
            if code is None:
                return
            pod.ready, pod._probing = code == 0 and pod.container.running(), None
        now = time.monotonic()
        if pod.container.running() and now >= pod._probe_at:
            pod._probe_at = now + (pod.probe_period_s if pod.ready else self.unready_probe_s)
            pod._probing = subprocess.Popen(pod.probe, env=pod.container.env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)  # fmt: skip
