"""The platform as a user runs it, on every device this machine offers: `luminal serve` and `luminal deploy
--gpu TYPE` as processes, requests through the real Triton client (JSON and binary, concurrent, so they batch),
answers against the reference interpreter, the worker on TYPE and every batch billed as TYPE at its price.

"cpu" runs everywhere; "gpu" is the first GPU the local provisioner offers (an H100 deploys as h100) and skips
where it finds none: on the lent GPU machine this is the issue's "the platform end to end on a GPU"
(bench/device_session.sh's platform stage)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

import luminal as lm
from luminal.provisioner.device_offer import local_offer
from luminal.store.settings import Settings
from tests.compiler.cuda.compare import assert_matches
from tests.tls_context import tls_context

KEY = "lm_test-bootstrap-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
REQUESTS_PER_MODE = 24


def _graph() -> lm.Graph:
    """A two-layer MLP over a symbolic batch, with random weights."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", 1, 64), 16))
    w1, b1, w2, b2 = g.weight("w1", (16, 64)), g.weight("b1", (64,)), g.weight("w2", (64, 8)), g.weight("b2", (8,))
    ((x @ w1 + b1).relu() @ w2 + b2).softmax(-1).output("probs")
    rng = np.random.default_rng(0)
    g.bind({n: rng.standard_normal(s).astype(np.float32) for n, s in
            (("w1", (16, 64)), ("b1", (64,)), ("w2", (64, 8)), ("b2", (8,)))})  # fmt: skip
    return g


@pytest.fixture(params=["cpu", "gpu"])
def device(request) -> str:
    if request.param == "cpu":
        return "cpu"
    offer = local_offer().default_device_only()
    gpus = sorted(offer.types - {"cpu"})
    if not gpus:
        pytest.skip(f"no GPU to deploy on: {offer.refusal('h100')}")
    return gpus[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _luminal(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "luminal.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@pytest.fixture
def served(tmp_path):
    """`luminal serve` on a free port with its state in tmp_path; the environment a client of it uses."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUMINAL_")}
    env |= {"LUMINAL_BOOTSTRAP_KEY": KEY, "LUMINAL_CONFIG": str(tmp_path / "cli.toml")}
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "luminal.cli", "serve", "--port", str(port), "--data-dir",
                               str(tmp_path / "data")], env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url, logged = f"http://127.0.0.1:{port}", tmp_path / "serve.log"
    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, logged.read_text()
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1, verify=tls_context()).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "luminal serve did not become ready: " + logged.read_text()
        time.sleep(0.1)
    try:
        yield url, env | {"LUMINAL_URL": url, "LUMINAL_API_KEY": KEY}
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_serve_deploy_infer_and_bill_on_each_device(served, device, tmp_path):
    url, env = served
    graph = _graph()
    lm.save(graph, tmp_path / "mlp.lgraph")
    deployed = _luminal("deploy", str(tmp_path / "mlp.lgraph"), "--name", "mlp", "--gpu", device,
                        "--max-batch-size", "16", "--max-delay-ms", "30", env=env)  # fmt: skip
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert "Deployed mlp version 1" in deployed.stdout

    client = triton.InferenceServerClient(url.removeprefix("http://"), concurrency=REQUESTS_PER_MODE)
    rng, sent = np.random.default_rng(1), 0
    for binary in (False, True):
        rows = [rng.standard_normal((1 + i % 3, 16)).astype(np.float32) for i in range(REQUESTS_PER_MODE)]
        pending = []
        for x in rows:
            tensor = triton.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x, binary_data=binary)
            wanted = triton.InferRequestedOutput("probs", binary_data=binary)
            pending.append(client.async_infer("mlp", [tensor], outputs=[wanted], headers=dict(AUTH)))
        for x, call in zip(rows, pending):
            assert_matches({"probs": call.get_result().as_numpy("probs")}, lm.run(graph, {"x": x}))
        sent += len(rows)
    client.close()

    http = httpx.Client(base_url=url, headers=AUTH, timeout=30)
    (deployment,) = http.get("/v1/deployments").json()
    assert (deployment["gpu_type"], deployment["target"], deployment["status"]) == (device, device, "ready")
    workers = http.get(f"/v1/deployments/{deployment['id']}/workers").json()["workers"]
    assert workers and {w["device"] for w in workers} == {device}
    records = http.get("/v1/usage/records", params={"limit": 1000}).json()
    assert {r["gpu_type"] for r in records} == {device}  # what ran, billed as what it is
    assert sum(r["batch_size"] for r in records) == sent
    assert max(r["batch_size"] for r in records) > 1, "concurrent requests were never batched"
    executed = sum(r["ended_at"] - r["started_at"] for r in records)

    printed = _luminal("usage", "--by", "hour", "--format", "json", env=env, timeout=60)
    assert printed.returncode == 0, printed.stderr
    totals = json.loads(printed.stdout)["totals"]
    price = Settings().gpu_prices_per_second[device]
    assert totals["requests"] == sent and totals["gpu_seconds"] == pytest.approx(executed, rel=1e-9, abs=1e-9)
    assert totals["cost"] == pytest.approx(executed * price, rel=1e-6)
