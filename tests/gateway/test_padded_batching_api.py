"""Sequences of different lengths batch through the embedded platform: a deployment of a graph that declares
padding, called concurrently with token sequences of varied lengths, runs batches of more than one request
(counted by /metrics) and answers each exactly what the graph gives that request alone. SQLite only: nothing
here depends on the metadata store."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.graph_file import graph_to_bytes
from tests.gateway.conftest import deploy_and_wait, upload
from tests.gateway.test_metrics import scrape, value

VOCAB, WIDTH = 50, 6


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'meta.db'}"


def masked_encoder() -> lm.Graph:
    """Embedding lookup masked by attention_mask: hidden [b, s, 6] (follows s) and the masked mean [b, 6]."""
    g = lm.Graph()
    b, s = lm.sym("batch", max=32), lm.sym("seq", max=16)
    ids = g.input("input_ids", (b, s), lm.int64, pad={1: 0})
    mask = g.input("attention_mask", (b, s), lm.int64, pad={1: 0})
    weights = mask.to(lm.float32).unsqueeze(-1)
    hidden = (g.weight("table", (VOCAB, WIDTH))[ids] * weights).output("hidden")
    (hidden.sum(1) / weights.sum(1)).output("mean")
    table = np.random.default_rng(0).standard_normal((VOCAB, WIDTH)).astype(np.float32)
    return g.bind({"table": table})


def body(ids: np.ndarray) -> dict:
    tensors = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    return {
        "inputs": [
            {"name": n, "shape": list(a.shape), "datatype": "INT64", "data": a.ravel().tolist()}
            for n, a in tensors.items()
        ]
    }


def test_requests_of_varied_lengths_share_batches_and_get_their_lone_answers(server):
    client = server.client()
    assert upload(client, "enc", graph_to_bytes(masked_encoder())).status_code == 201
    # A long delay lets requests of one bucket gather: the test is about what they share, not latency.
    assert deploy_and_wait(client, "enc", max_batch_size=32, max_queue_delay_ms=200)["status"] == "ready"
    rng = np.random.default_rng(3)
    # 9..16, each three times: one length bucket (16), so unpadded at most 3 requests could share a batch
    lengths = [int(n) for n in rng.permutation(np.repeat(np.arange(9, 17), 3))]
    sequences = [rng.integers(1, VOCAB, (1, n)).astype(np.int64) for n in lengths]

    def call(ids: np.ndarray) -> dict[str, np.ndarray]:
        r = client.post("/v2/models/enc/infer", json=body(ids))
        assert r.status_code == 200, r.text
        return {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"]) for o in r.json()["outputs"]}

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, sequences))
    graph = masked_encoder()
    for ids, got in zip(sequences, answers, strict=True):
        want = lm.run(graph, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        assert got["hidden"].shape == (1, ids.shape[1], WIDTH)  # cut back to the request's own length
        np.testing.assert_allclose(got["hidden"], want["hidden"], rtol=0, atol=1e-6)
        np.testing.assert_allclose(got["mean"], want["mean"], rtol=0, atol=1e-6)
    _, samples = scrape(server)
    requests, batches = value(samples, "nv_inference_count"), value(samples, "nv_inference_exec_count")
    assert requests == len(sequences)
    assert batches < requests / 3, f"{requests} requests ran as {batches} batches: lengths did not share them"
