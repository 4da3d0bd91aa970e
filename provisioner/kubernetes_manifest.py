"""The worker Deployment of one deployment, as the Kubernetes API takes it (a plain dict, apps/v1).

Its pods run `settings.worker_command DEPLOYMENT_ID POD_NAME GPU_TYPE` in `settings.worker_image` (a CPU
deployment) or `settings.gpu_worker_image` (a GPU deployment: the image with CuPy, deploy/docker/); their
database, queue and artifact URLs come from a Secret (`settings.kubernetes_worker_secret`), never from the
Deployment itself, which anyone allowed to read Deployments can read.
"""

from __future__ import annotations

import re

from luminal.provisioner.backends import serves_hash
from luminal.provisioner.device_offer import CPU
from luminal.provisioner.worker_settings import worker_settings
from luminal.scheduler.worker_spec import WorkerSpec
from luminal.store.settings import Settings

PART_OF = "luminal"
COMPONENT = "worker"
MANAGED_BY = "luminal-provisioner"
DEPLOYMENT_LABEL = "luminal.dev/deployment"
SPEC_ANNOTATION = "luminal.dev/serves"
# A label value: at most 63 characters, alphanumeric at both ends. GPU types come from the database, so they are
# checked before they reach a label, a node selector or a command line.
_LABEL_VALUE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
# Probes run the worker probe in the worker's own image: a worker process serves no HTTP, its liveness is the
# heartbeat it writes to the registry between batches.
PROBE = ["python", "-m", "luminal.provisioner.worker_probe"]
DATA_DIR = "/var/lib/luminal"  # the worker's local state (its artifact cache): the pod's own volume


def deployment_name(deployment_id: int) -> str:
    """The Deployment's name: only digits come from outside, so it is always a valid DNS-1123 name."""
    if not isinstance(deployment_id, int) or isinstance(deployment_id, bool) or deployment_id < 0:
        raise ValueError(f"a deployment id is a non-negative int, got {deployment_id!r}")
    return f"luminal-worker-d{deployment_id}"


def selector(deployment_id: int) -> dict[str, str]:
    """The labels that pick this deployment's pods (a Deployment's selector cannot change once created)."""
    return {"app.kubernetes.io/component": COMPONENT, DEPLOYMENT_LABEL: str(deployment_id)}


def managed_selector() -> str:
    """A label selector of every worker Deployment this provisioner created."""
    return f"app.kubernetes.io/managed-by={MANAGED_BY},app.kubernetes.io/component={COMPONENT}"


def worker_deployment(settings: Settings, spec: WorkerSpec, replicas: int) -> dict:
    d, gpu_type = spec.deployment_id, spec.gpu_type
    if not _LABEL_VALUE.match(gpu_type):
        raise ValueError(f"deployment {d}: GPU type {gpu_type!r} is not a valid Kubernetes label value")
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    name = deployment_name(d)
    labels = {
        "app.kubernetes.io/name": "luminal-worker",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "luminal.dev/gpu-type": gpu_type,
        **selector(d),
    }
    # A change of what the workers serve (a PATCH of the program or batching) changes the pod template, so
    # Kubernetes rolls every pod over to the new settings (a worker reads its spec once, when it starts).
    annotations = {SPEC_ANNOTATION: serves_hash(spec)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": settings.kubernetes_namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector(d)},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": _pod_spec(settings, spec),
            },
        },
    }


def _pod_spec(settings: Settings, spec: WorkerSpec) -> dict:
    gpu = spec.gpu_type != CPU
    # Pods stop like local workers: SIGTERM, the batch being executed finishes, then the process exits.
    grace_s = int(settings.execution_timeout_s) + 30
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        # The gateway's settings (`env` wins over the Secret's keys of the same name, as it does on every backend).
        *({"name": name, "value": value} for name, value in worker_settings(settings).items()),
        {"name": "LUMINAL_DATA_DIR", "value": DATA_DIR},
    ]
    resources: dict = {"requests": {"cpu": "1", "memory": "2Gi"}}
    if gpu:  # an extended resource: requests must equal limits
        resources = {"requests": {**resources["requests"], "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    container = {
        "name": "worker",
        "image": settings.gpu_worker_image if gpu else settings.worker_image,
        "command": list(settings.worker_command),
        "args": [str(spec.deployment_id), "$(POD_NAME)", spec.gpu_type],  # $(POD_NAME): the worker id
        "env": env,
        "envFrom": [{"secretRef": {"name": settings.kubernetes_worker_secret}}],
        "resources": resources,
        # Loading a large program (downloading it first) may take minutes: liveness waits for the first ready.
        "startupProbe": _probe("ready", period_s=10, failures=60),
        "readinessProbe": _probe("ready", period_s=10, failures=3),
        "livenessProbe": _probe("live", period_s=30, failures=3),
        # As the chart's containers: an unprivileged user on a read-only root, state on the data volume.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "data", "mountPath": DATA_DIR}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    pod: dict = {
        "containers": [container],
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
        "terminationGracePeriodSeconds": grace_s,
        "automountServiceAccountToken": False,  # workers never call the Kubernetes API
    }
    if gpu:
        pod["nodeSelector"] = {settings.kubernetes_gpu_label: spec.gpu_type}
        pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return pod


def _probe(check: str, period_s: int, failures: int) -> dict:
    return {
        "exec": {"command": [*PROBE, check]},
        "periodSeconds": period_s,
        "timeoutSeconds": 10,
        "failureThreshold": failures,
    }
