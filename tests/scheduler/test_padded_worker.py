"""A worker serving a graph that declares padding: requests of different lengths run in shared batches and
each gets its lone answer; a request over the symbol's maximum, or whose inputs disagree on the length, is
answered 400 alone without failing its neighbours."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.artifact import save_program
from luminal.graph_json import signature, symbol_table
from luminal.scheduler.work import INVALID_INPUT, OK, InferenceRequest
from tests.gateway.test_padded_batching_api import VOCAB, masked_encoder
from tests.scheduler.test_worker import DEPLOYMENT, Running, spec


@pytest.fixture(scope="module")
def program_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("programs")
    save_program(lm.compile(masked_encoder(), target="cpu"), folder / "enc.lprog")
    return folder


def encoder_spec():
    g = masked_encoder()
    return replace(spec(max_batch_size=32, delay_ms=200), program_key="enc.lprog", signature=signature(g),
                   symbols=symbol_table(g))  # fmt: skip


def tokens(length: int, seed: int, mask_length: int | None = None) -> InferenceRequest:
    ids = np.random.default_rng(seed).integers(1, VOCAB, (1, length)).astype(np.int64)
    mask = np.ones((1, mask_length or length), np.int64)
    return InferenceRequest(DEPLOYMENT, 1, {"input_ids": ids, "attention_mask": mask})


def test_mixed_lengths_share_batches_and_bad_ones_fail_alone(program_dir):
    good = [tokens(n, seed) for seed, n in enumerate([3, 9, 5, 16, 1, 12, 7, 2])]
    too_long, mismatched = tokens(17, 100), tokens(4, 101, mask_length=5)  # seq's maximum is 16
    with Running(program_dir, encoder_spec()) as running:
        results = running.serve([*good[:3], too_long, *good[3:6], mismatched, *good[6:]])
    by_id = {r.request_id: r for r in results}
    assert by_id[too_long.id].status == INVALID_INPUT and "seq" in by_id[too_long.id].error
    assert by_id[mismatched.id].status == INVALID_INPUT
    graph = masked_encoder()
    for request in good:
        result = by_id[request.id]
        assert result.status == OK, result.error
        want = lm.run(graph, request.inputs)
        for name in ("hidden", "mean"):
            np.testing.assert_allclose(result.outputs[name], want[name], rtol=0, atol=1e-6, err_msg=name)
    lengths = {r.id: r.inputs["input_ids"].shape[1] for r in good}
    mixed = [rec for rec in running.ledger.records if len({lengths.get(i) for i in rec.request_ids}) > 1]
    assert mixed, "no batch held requests of different lengths"
    billed = {i for rec in running.ledger.records for i in rec.request_ids}
    assert too_long.id not in billed and mismatched.id not in billed
