"""The user's day, end to end against a real server: a PyTorch model exported to .lgraph, deployed with
`luminal deploy`, called by the real Triton client in JSON and in binary mode with concurrent requests (so the
scheduler batches them), and billed: the usage report's GPU-seconds equal the sum of the recorded batch
execution times, and every request is counted once."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import tritonclient.http as triton
from typer.testing import CliRunner

import luminal as lm
import luminal.torch
from luminal.cli.main import app
from tests.gateway.conftest import BOOTSTRAP_KEY

AUTH = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
REQUESTS_PER_MODE = 24


@pytest.fixture
def exported(tmp_path):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3)).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    graph = luminal.torch.export(module, (torch.randn(2, 8),), dynamic_shapes=({0: batch},))
    path = tmp_path / "mlp.lgraph"
    lm.save(graph, path)
    return module, path


def test_export_deploy_infer_and_bill(server, exported):
    module, path = exported
    env = {"LUMINAL_URL": server.url, "LUMINAL_API_KEY": BOOTSTRAP_KEY}
    runner = CliRunner()
    deployed = runner.invoke(app, ["deploy", str(path), "--name", "mlp", "--max-batch-size", "16",
                                   "--max-delay-ms", "30", "--gpu", "cpu"], env=env)  # fmt: skip
    assert deployed.exit_code == 0, deployed.output

    client = triton.InferenceServerClient(server.host_port, concurrency=REQUESTS_PER_MODE)
    metadata = client.get_model_metadata("mlp", headers=AUTH)
    (input_meta,), (output_meta,) = metadata["inputs"], metadata["outputs"]
    rng = np.random.default_rng(0)
    sent = 0
    for binary in (False, True):
        rows = [rng.standard_normal((1 + i % 2, 8)).astype(np.float32) for i in range(REQUESTS_PER_MODE)]
        pending = []
        for x in rows:
            tensor = triton.InferInput(input_meta["name"], list(x.shape), "FP32")
            tensor.set_data_from_numpy(x, binary_data=binary)
            wanted = triton.InferRequestedOutput(output_meta["name"], binary_data=binary)
            pending.append(client.async_infer("mlp", [tensor], outputs=[wanted], headers=dict(AUTH)))
        for x, call in zip(rows, pending):
            got = call.get_result().as_numpy(output_meta["name"])
            want = module(torch.from_numpy(x)).detach().numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        sent += len(rows)
    client.close()

    http = server.client()
    records = http.get("/v1/usage/records", params={"limit": 1000}).json()
    executed = sum(r["ended_at"] - r["started_at"] for r in records)
    assert sorted(i for r in records for i in r["request_ids"]) == sorted(
        {i for r in records for i in r["request_ids"]}
    )
    assert sum(r["batch_size"] for r in records) == sent
    assert {r["gpu_type"] for r in records} == {"cpu"}  # what ran: this machine's CPU
    assert max(r["batch_size"] for r in records) > 1, "concurrent requests were never batched"
    report = http.get("/v1/usage", params={"by": "second"}).json()
    assert report["totals"]["requests"] == sent and report["totals"]["batches"] == len(records)
    assert report["totals"]["gpu_seconds"] == pytest.approx(executed, rel=1e-9, abs=1e-9)
    assert report["totals"]["cost"] == pytest.approx(executed * 0.00001, rel=1e-6)  # the default cpu price

    printed = runner.invoke(app, ["usage", "--by", "hour", "--format", "json"], env=env)
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.stdout)["totals"]["gpu_seconds"] == pytest.approx(executed, rel=1e-9, abs=1e-9)
