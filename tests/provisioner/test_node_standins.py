"""The node stand-ins read what the backends write as Kubernetes and systemd read it: $(VAR) references in a pod's
args, the worker unit of an instance's user data and its environment file; each container's volumes are bound
so that none hides another's host folder; and a deleted pod is replaced under a new name, as a ReplicaSet
replaces it, while it stops within its grace period."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from luminal.provisioner.ec2_user_data import user_data
from luminal.provisioner.kubernetes_manifest import MANAGED_BY, selector
from luminal.store.settings import Settings
from tests.provisioner.container_standin import Container, mount_order, require_mount_namespaces
from tests.provisioner.kubelet_standin import KubeletStandIn, expand
from tests.provisioner.kubernetes_emulator import running_emulator
from tests.provisioner.vm_standin import environment_file, heredoc, unit_service


def test_pod_args_expand_as_kubernetes_expands_them():
    env = {"POD_NAME": "luminal-worker-d3-abc"}
    assert expand("$(POD_NAME)", env) == "luminal-worker-d3-abc"
    assert expand("$(UNDEFINED)", env) == "$(UNDEFINED)"  # kept as written
    assert expand("$$(POD_NAME)", env) == "$(POD_NAME)"  # $$ escapes a reference


def test_the_worker_unit_and_its_environment_are_read_as_systemd_reads_them():
    settings = Settings(
        ec2_ami_id="ami-12345678", ec2_worker_wheel_url="https://x.example/luminal_cloud-0.1-py3-none-any.whl"
    )
    script = user_data(settings, 11, "d11-abc", "cpu", "us-east-1")
    service = unit_service(heredoc(script, "UNIT"))
    assert service["ExecStart"] == "/usr/bin/env python -m luminal.scheduler.worker_process 11 d11-abc cpu"
    assert (service["Restart"], service["KillSignal"], service["TimeoutStopSec"]) == ("on-failure", "SIGTERM", "330")
    assert environment_file('A="x\\"y\\\\z"\nB="plain"\n') == {"A": 'x"y\\z', "B": "plain"}
    with pytest.raises(ValueError, match="would not read"):
        environment_file("A=unquoted")
    with pytest.raises(ValueError, match="no <<'NOPE' document"):
        heredoc(script, "NOPE")


def test_a_mount_over_the_folder_holding_a_volume_goes_last():
    mounts = {"/tmp": Path("/tmp/node/pod/tmp"), "/var/lib/luminal": Path("/tmp/node/pod/data"), "/opt/x": Path("/v")}
    assert [path for path, _ in mount_order(mounts)] == ["/var/lib/luminal", "/opt/x", "/tmp"]


def test_a_volume_over_the_folder_holding_the_image_does_not_hide_it(tmp_path):
    """A checkout cloned under /tmp is the image of every container; the pod's fresh /tmp must not hide it."""
    require_mount_namespaces()
    image = tmp_path / "image"  # under /tmp, as a CI clone may be
    image.mkdir()
    (image / "marker").write_text("the image's own file")
    log = tmp_path / "container.log"
    container = Container(["cat", str(image / "marker")], {"PATH": "/usr/bin:/bin"}, {"/tmp": tmp_path / "vol"}, log,
                          image=(image,))  # fmt: skip
    container.start()
    container.process.wait(30)
    assert container.exit_code() == 0 and log.read_text() == "the image's own file", log.read_text()
    mount_point = tmp_path / "vol" / image.relative_to("/tmp")  # made in the volume, the image bound over it
    assert mount_point.is_dir() and not any(mount_point.iterdir())


def _deployment(name: str, grace_s: int) -> dict:
    """A worker Deployment of one pod whose process ignores SIGTERM (a worker draining its streams): only the grace
    period's SIGKILL ends it. It echoes its POD_NAME, as the worker takes it for its id."""
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY, **selector(1)}
    ignores_sigterm = 'trap "" TERM; echo "$POD_NAME"; while :; do sleep 0.1; done'
    container = {"name": "worker", "image": "luminal-cloud:test", "command": ["sh", "-c", ignores_sigterm],
                 "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "node", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector(1)},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": grace_s},
            },
        },
    }


def _wait_until_it_says(container: Container, line: str) -> None:
    deadline = time.monotonic() + 30
    while container.log.read_text().split() != [line]:
        assert container.running() and time.monotonic() < deadline, container.tail()
        time.sleep(0.05)


def test_a_deleted_pod_is_replaced_under_a_new_name_and_killed_after_its_grace(tmp_path):
    require_mount_namespaces()
    client = pytest.importorskip("kubernetes.client")
    with running_emulator() as emulator:
        client.AppsV1Api(emulator.client()).create_namespaced_deployment("node", _deployment("luminal-worker-d1", 60))
        node = KubeletStandIn(emulator.client(), "node", {"PATH": "/usr/bin:/bin"}, tmp_path)  # stepped by the test
        try:
            node.step()
            (old,) = node.workers()
            _wait_until_it_says(node.workers()[old], old)  # its trap is set: from now on it ignores SIGTERM
            deleted = node.delete_pod(old, grace_s=1.0)
            deleted_at = time.monotonic()
            assert not node.workers()  # a terminating pod is not one of the Deployment's
            node.step()
            (new,) = node.workers()
            assert new != old and new.startswith("luminal-worker-d1-")  # its replacement, under a new name
            replacement = node.workers()[new]
            _wait_until_it_says(replacement, new)  # the replacement's own POD_NAME, its trap set
            while deleted.running() and time.monotonic() - deleted_at < 10:
                time.sleep(0.1)
                node.step()
            assert deleted.exit_code() == -9 and time.monotonic() - deleted_at > 1.0  # SIGTERM ignored: SIGKILLed
            assert replacement.running() and node.workers() == {new: replacement}  # never restarted, the old one
            node.delete_pod(new, grace_s=0)  # forced: killed at once, not told to stop (its worker would drain)
            assert replacement.exit_code() == -9
            node.step()
            assert new not in node.workers()
        finally:
            for container in node.take_all():  # its loop never ran: the test stepped it
                container.kill()
