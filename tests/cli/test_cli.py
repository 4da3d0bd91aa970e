"""`luminal serve` as a real process (first start prints the key once) and `luminal deploy` against a server."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import luminal as lm
from luminal.cli.main import app
from luminal.provisioner import backends
from luminal.provisioner.device_offer import DeviceOffer
from luminal.store.database import Database
from luminal.store.tenants import tenant_for_key
from tests.gateway.conftest import BOOTSTRAP_KEY, tiny_graph
from tests.gateway.serve_process import wait_until_ready

runner = CliRunner()


@pytest.fixture
def model_file(tmp_path: Path, model_bytes: bytes) -> Path:
    path = tmp_path / "tiny model.lgraph"
    path.write_bytes(model_bytes)
    return path


def deploy(server, *args: str, key: str = BOOTSTRAP_KEY):
    env = {"LUMINAL_URL": server.url, "LUMINAL_API_KEY": key}
    return runner.invoke(app, ["deploy", *args], env=env)


def test_deploy_uploads_waits_and_prints_a_working_endpoint(server, model_file):
    result = deploy(server, str(model_file), "--max-batch-size", "4")
    assert result.exit_code == 0, result.output
    endpoint = re.search(r"Endpoint: (\S+)", result.stdout).group(1)
    assert endpoint == f"{server.url}/v2/models/tiny-model/versions/1/infer"
    # The curl line as printed, pasted into bash with the key in the environment (a 401 if bash never expands it).
    (curl,) = [line for line in result.stdout.splitlines() if line.startswith("curl ")]
    env = {"PATH": os.environ["PATH"], "LUMINAL_API_KEY": BOOTSTRAP_KEY}  # no proxy variables: curl goes direct
    pasted = subprocess.run(["bash", "-c", curl + " --silent --write-out '\\n%{http_code}'"], env=env,
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    body, status = pasted.stdout.rsplit("\n", 1)
    assert (pasted.returncode, status) == (0, "200"), (pasted, curl)
    (output,) = json.loads(body)["outputs"]
    assert (output["name"], output["shape"], output["datatype"]) == ("probs", [1, 3], "FP32")
    want = lm.run(tiny_graph(), {"x": np.zeros((1, 4), np.float32)})["probs"].reshape(-1)
    np.testing.assert_allclose(output["data"], want, rtol=1e-5)
    x = np.ones((2, 4), np.float32)
    body = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
    answer = server.client().post(endpoint, json=body).json()
    want = lm.run(tiny_graph(), {"x": x})["probs"].reshape(-1)
    np.testing.assert_allclose(answer["outputs"][0]["data"], want, rtol=1e-5)
    deployment = server.client().get("/v1/deployments").json()[0]
    assert (deployment["gpu_type"], deployment["target"], deployment["max_batch_size"]) == ("cpu", "cpu", 4)


@pytest.fixture
def no_gpu(monkeypatch):
    """The server's workers find no GPU, whatever this machine has (requested before `server`, which reads it)."""
    monkeypatch.setattr(backends, "local_offer", DeviceOffer)


def test_deploy_on_a_gpu_the_platform_lacks_says_why_and_fails(no_gpu, server, model_file):
    result = deploy(server, str(model_file), "--gpu", "h100")
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert (
        "deployment 1 is compiled for h100 but cannot run: no worker can provide h100: this platform's local "
        "provisioner found no GPU. Remove it with `luminal deployments rm 1`"
    ) in " ".join(result.stderr.split())
    env = {"LUMINAL_URL": server.url, "LUMINAL_API_KEY": BOOTSTRAP_KEY}
    listed = runner.invoke(app, ["deployments", "ls"], env=env)
    assert listed.exit_code == 0 and "unschedulable" in listed.stdout
    assert "deployment 1 unschedulable: no worker can provide h100" in " ".join(listed.stdout.split())


@pytest.mark.parametrize(
    "args,key,message",
    [
        (["missing.lgraph"], BOOTSTRAP_KEY, "missing.lgraph: no such file"),
        (["MODEL"], "lm_wrong-key", "401: invalid or revoked API key"),
        (["MODEL", "--gpu", "tpu"], BOOTSTRAP_KEY, "400: unknown gpu_type 'tpu'"),
        (["BAD"], BOOTSTRAP_KEY, "400: invalid .lgraph file"),
    ],
)
def test_deploy_errors_are_one_line(server, model_file, tmp_path, args, key, message):
    bad = tmp_path / "bad.lgraph"
    bad.write_bytes(b"not a graph")
    args = [{"MODEL": str(model_file), "BAD": str(bad)}.get(a, a) for a in args]
    result = deploy(server, *args, key=key)
    assert result.exit_code == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_once(data_dir: Path, env: dict[str, str]) -> str:
    """Start `luminal serve`, wait until it answers, stop it; return what it printed."""
    port = _free_port()
    cmd = [sys.executable, "-m", "luminal.cli", "serve", "--port", str(port), "--data-dir", str(data_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", proc)
    finally:
        proc.terminate()
    return proc.communicate(timeout=30)[0]


def test_serve_prints_the_first_key_once(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUMINAL_")}
    first = _serve_once(tmp_path / "data", env)
    key = re.search(r"shown only this once:\s*(lm_\S+)", first).group(1)
    db = Database(f"sqlite:///{tmp_path / 'data' / 'luminal.db'}")
    with db.session() as session:
        assert tenant_for_key(session, key).name == "default"  # the printed key is the stored tenant's
    db.dispose()
    second = _serve_once(tmp_path / "data", env)
    assert key not in second and "shown only this once" not in second
    assert "Serving on" in second
    with_env = _serve_once(tmp_path / "other", {**env, "LUMINAL_BOOTSTRAP_KEY": BOOTSTRAP_KEY})
    assert "LUMINAL_BOOTSTRAP_KEY" in with_env and BOOTSTRAP_KEY not in with_env
