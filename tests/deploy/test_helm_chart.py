"""The Helm chart, rendered without a helm binary (helm-python-sdk binds Helm's own Go SDK) under each values
file in its ci/ folder and the defaults: it lints with no errors or warnings, every rendered document is valid
for Kubernetes 1.33 (kubernetes-validate, strict), and the documents say what the platform needs: probes on the
OIP health routes, GPU requests and node selectors, RBAC for the provisioner's calls, secrets apart."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from luminal.store.settings import Settings
from tests.provisioner.kubernetes_emulator import KUBERNETES_VERSION, validate

helm = pytest.importorskip("helm_python")
yaml = pytest.importorskip("yaml")

CHART = Path(__file__).parents[2] / "deploy" / "helm" / "luminal"
# The chart's appVersion is the package's version: the image tags it defaults to are the ones built from this tree.
VERSION = tomllib.loads((CHART.parents[2] / "pyproject.toml").read_text())["project"]["version"]
VALUES_FILES = [None, *sorted((CHART / "ci").glob("*-values.yaml"))]
NAMESPACE = "luminal-prod"


def values_of(path: Path | None) -> dict:
    return {} if path is None else yaml.safe_load(path.read_text())


def render(values: dict) -> list[dict]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name="demo", namespace=NAMESPACE)
    documents = []
    for name, text in sorted(manifests.items()):
        if name.endswith(".yaml"):
            documents += [d for d in yaml.safe_load_all(text) if d]
    return documents


def find(documents: list[dict], kind: str, name: str) -> dict:
    (found,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=lambda p: "defaults" if p is None else p.stem)
def test_lints_and_every_document_is_valid(values_file):
    report = helm.lint(str(CHART), values_of(values_file), kube_version=f"v{KUBERNETES_VERSION}", strict=True)
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report["messages"]
    documents = render(values_of(values_file))
    for document in documents:
        validate(document)
    kinds = {d["kind"] for d in documents}
    assert {"Deployment", "Service", "Secret", "ServiceAccount", "Role", "RoleBinding"} <= kinds


def test_defaults_gateway_probes_rbac_and_secrets():
    documents = render({})
    gateway = find(documents, "Deployment", "demo-luminal-gateway")
    (container,) = gateway["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert gateway["spec"]["replicas"] == 2  # several gateways: the provisioner lease lets one scale
    env = env_of(container)
    assert env["LUMINAL_WORKER_BACKEND"] == "kubernetes" and env["LUMINAL_KUBERNETES_NAMESPACE"] == NAMESPACE
    assert env["LUMINAL_KUBERNETES_WORKER_SECRET"] == "demo-luminal-services"
    # Every setting the chart gives is one the platform reads (a misspelt one would be silently ignored).
    fields = {f"LUMINAL_{name.upper()}" for name in Settings.model_fields}
    assert {name for name in env if name.startswith("LUMINAL_")} <= fields
    assert gateway["spec"]["template"]["spec"]["serviceAccountName"] == "demo-luminal-provisioner"
    # The images deploy/docker/ builds, under the tags the platform's own defaults name (none is published).
    defaults = Settings()
    assert container["image"] == env["LUMINAL_WORKER_IMAGE"] == defaults.worker_image == f"luminal-cloud:{VERSION}"
    assert env["LUMINAL_GPU_WORKER_IMAGE"] == defaults.gpu_worker_image == f"luminal-cloud-cuda-worker:{VERSION}"

    role = find(documents, "Role", "demo-luminal-provisioner")
    verbs = {verb for rule in role["rules"] if "deployments" in rule["resources"] for verb in rule["verbs"]}
    assert {"create", "get", "list", "patch", "delete"} <= verbs  # what KubernetesDeployments calls
    assert all(rule["apiGroups"] == ["apps"] for rule in role["rules"])  # no Secrets, nothing cluster-wide
    binding = find(documents, "RoleBinding", "demo-luminal-provisioner")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "demo-luminal-provisioner", "namespace": NAMESPACE}
    ]

    services = find(documents, "Secret", "demo-luminal-services")["stringData"]
    assert services["LUMINAL_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert services["LUMINAL_QUEUE_URL"].startswith("redis://")
    assert find(documents, "Secret", "demo-luminal-keys").get("stringData") in (None, {})
    compile_worker = find(documents, "Deployment", "demo-luminal-compile-worker")
    assert compile_worker["spec"]["replicas"] == 0  # by default the gateway compiles in its own processes
    gateway_env = env_of(
        find(documents, "Deployment", "demo-luminal-gateway")["spec"]["template"]["spec"]["containers"][0]
    )
    assert "LUMINAL_COMPILE_RUNNER" not in gateway_env
    assert not [d for d in documents if d["kind"] == "HorizontalPodAutoscaler"]


def test_gpu_worker_pools_request_their_gpu_on_their_nodes():
    documents = render(values_of(CHART / "ci" / "gpu-workers-values.yaml"))
    h100 = find(documents, "Deployment", "demo-luminal-pool-h100-d3")
    pod = h100["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert h100["spec"]["replicas"] == 2
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {"luminal.dev/gpu-type": "h100"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert container["command"] + container["args"] == [
        "python", "-m", "luminal.scheduler.worker_process", "3", "$(POD_NAME)", "h100"
    ]  # fmt: skip
    assert container["image"] == f"luminal-cloud-cuda-worker:{VERSION}"  # the image with CuPy
    # Workers read the service URLs, never the gateway's keys.
    assert container["envFrom"] == [{"secretRef": {"name": "demo-luminal-services"}}]
    assert pod["automountServiceAccountToken"] is False
    l4 = find(documents, "Deployment", "demo-luminal-pool-l4-d5")["spec"]["template"]["spec"]
    assert l4["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert l4["tolerations"][0]["key"] == "dedicated"
    cpu = find(documents, "Deployment", "demo-luminal-pool-cpu-d7")["spec"]["template"]["spec"]
    assert "nodeSelector" not in cpu and "nvidia.com/gpu" not in str(cpu["containers"][0]["resources"])
    assert cpu["containers"][0]["image"] == f"luminal-cloud:{VERSION}"  # the platform's image runs CPU programs


def test_external_services_and_keys_by_value():
    values = values_of(CHART / "ci" / "external-services-values.yaml")
    documents = render(values)
    services = find(documents, "Secret", "demo-luminal-services")["stringData"]
    assert services["LUMINAL_DATABASE_URL"] == values["externalServices"]["postgresql"]["url"]
    assert services["LUMINAL_QUEUE_URL"].startswith("rediss://")
    assert services["LUMINAL_ARTIFACT_URL"] == "s3://luminal-artifacts/prod"
    assert services["AWS_SECRET_ACCESS_KEY"] == "example/secret/key+value"
    assert services["AWS_DEFAULT_REGION"] == "eu-central-1"
    assert services["LUMINAL_ARTIFACT_CACHE_BYTES"] == "21474836480"  # every pod's cache limit, workers' too
    assert Settings(artifact_cache_bytes=services["LUMINAL_ARTIFACT_CACHE_BYTES"]).artifact_cache_bytes == 20 << 30
    keys = find(documents, "Secret", "demo-luminal-keys")["stringData"]
    assert keys["LUMINAL_BOOTSTRAP_KEY"] == values["secrets"]["bootstrapKey"]
    assert set(keys) == {
        "LUMINAL_BOOTSTRAP_KEY",
        "LUMINAL_ADMIN_TOKEN",
        "LUMINAL_METRICS_TOKEN",
        "LUMINAL_WEBHOOK_SECRET",
    }
    for document in documents:  # secrets appear in the Secrets only
        if document["kind"] != "Secret":
            assert "pa55word" not in str(document) and "example/secret" not in str(document)
    account = find(documents, "ServiceAccount", "demo-luminal-provisioner")
    assert "eks.amazonaws.com/role-arn" in account["metadata"]["annotations"]
    # An existing Secret instead: the chart creates none and everything reads that one.
    documents = render({**values, "secrets": {"existingServicesSecret": "prod-luminal-urls"}})
    assert not [d for d in documents if d["metadata"]["name"] == "demo-luminal-services"]
    gateway = find(documents, "Deployment", "demo-luminal-gateway")["spec"]["template"]["spec"]["containers"][0]
    assert {"secretRef": {"name": "prod-luminal-urls"}} in gateway["envFrom"]


def test_autoscaling():
    documents = render(values_of(CHART / "ci" / "autoscaling-values.yaml"))
    hpa = find(documents, "HorizontalPodAutoscaler", "demo-luminal-gateway")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "demo-luminal-gateway",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 20)
    gateway = find(documents, "Deployment", "demo-luminal-gateway")
    assert "replicas" not in gateway["spec"]  # the HPA owns the count
    env = env_of(gateway["spec"]["template"]["spec"]["containers"][0])
    assert env["LUMINAL_SCALE_TARGET_PER_REPLICA"] == "8" and env["LUMINAL_MAX_QUEUE_DEPTH"] == "2048"
    assert Settings(scale_target_per_replica=env["LUMINAL_SCALE_TARGET_PER_REPLICA"]).scale_target_per_replica == 8
    assert find(documents, "Deployment", "demo-luminal-compile-worker")["spec"]["replicas"] == 2
    assert env["LUMINAL_COMPILE_RUNNER"] == "celery"  # compile workers run: the gateway sends its compiles there


def test_grpc_is_a_second_port_of_the_gateway_only_when_set():
    def gateway_of(values: dict) -> tuple[dict, dict]:
        documents = render(values)
        deployment = find(documents, "Deployment", "demo-luminal-gateway")
        return deployment["spec"]["template"]["spec"]["containers"][0], find(
            documents, "Service", "demo-luminal-gateway"
        )

    container, service = gateway_of({})
    assert "--grpc-port" not in container["command"] and [p["name"] for p in container["ports"]] == ["http"]
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]
    container, service = gateway_of({"gateway": {"grpcPort": 9001, "service": {"grpcPort": 9443}}})
    assert container["command"][-2:] == ["--grpc-port", "9001"]
    assert {"name": "grpc", "containerPort": 9001} in container["ports"]
    grpc_port = [p for p in service["spec"]["ports"] if p["name"] == "grpc"]
    assert grpc_port == [{"name": "grpc", "port": 9443, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"}]


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        ({"workers": {"pools": [{"gpuType": "h100; rm -rf /", "deploymentId": 1}]}}, "/workers/pools/0/gpuType"),
        ({"workers": {"pools": [{"gpuType": "h100"}]}}, "missing property 'deploymentId'"),
        ({"gatway": {"replicas": 3}}, "'gatway' not allowed"),  # a misspelt key is no silent default
        ({"gateway": {"replicas": "three"}}, "/gateway/replicas"),
        ({"gateway": {"grpcPort": 70000}}, "/gateway/grpcPort"),
        ({"secrets": {"adminToken": "short"}}, "/secrets/adminToken"),
        ({"externalServices": {"s3": {"cacheBytes": -1}}}, "/externalServices/s3/cacheBytes"),
        ({"externalServices": {"redis": {"url": "http://cache"}}}, "/externalServices/redis/url"),
    ],
)
def test_bad_values_are_refused_by_name(values, refusal):
    report = helm.lint(str(CHART), values, strict=True)
    assert any(refusal in error for error in report["errors"]), report["errors"]
    with pytest.raises(Exception, match=re.escape(refusal)):
        render(values)
