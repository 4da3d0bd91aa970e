"""The node stand-ins read what the backends write as Kubernetes and systemd read it: $(VAR) references in a pod's
args, the worker unit of an instance's user data and its environment file; and each container's volumes are bound
so that none hides another's host folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from luminal.provisioner.ec2_user_data import user_data
from luminal.store.settings import Settings
from tests.provisioner.container_standin import Container, mount_order, require_mount_namespaces
from tests.provisioner.kubelet_standin import expand
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
