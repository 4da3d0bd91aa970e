"""Run requests of different lengths as padded batches and alone, and compare: the check every padded model
passes. Tolerance: float32 results within 2e-5 absolute (padding adds exact zeros to softmax and pooling sums;
only the order numpy sums in changes)."""

from __future__ import annotations

import numpy as np

import luminal as lm
from luminal.batching.assemble import assemble, compatible_groups, split
from luminal.batching.layout import BatchLayout
from luminal.graph_json import signature, symbol_table
from luminal.scheduler.work import InferenceRequest

TOLERANCE = 2e-5


def requests_of(lengths, vocab: int, inputs: tuple[str, ...], seed: int = 0) -> list[InferenceRequest]:
    """One request per length (a row each, the last request two rows), tokens random, mask all ones."""
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate(lengths):
        rows = 2 if k == len(lengths) - 1 else 1
        feed = {"input_ids": rng.integers(1, vocab, (rows, n)).astype(np.int64)}
        feed["attention_mask"] = np.ones((rows, n), np.int64)
        if "token_type_ids" in inputs:
            feed["token_type_ids"] = rng.integers(0, 2, (rows, n)).astype(np.int64)
        out.append(InferenceRequest(1, 1, feed))
    return out


def check_batched_equals_alone(g: lm.Graph, requests: list[InferenceRequest], length_buckets=None) -> int:
    """Every request's batched answer against its lone run; returns how many batches ran."""
    layout = BatchLayout.from_signature(signature(g), symbol_table(g), length_buckets=length_buckets)
    assert layout is not None and layout.padding is not None
    groups = compatible_groups(requests, layout)
    for group in groups:
        batch = assemble(group, layout)
        for request, got in zip(group, split(batch, lm.run(g, batch.inputs))):
            want = lm.run(g, request.inputs)
            assert got.keys() == want.keys()
            for name in want:
                assert got[name].shape == want[name].shape, name
                np.testing.assert_allclose(got[name], want[name], rtol=0, atol=TOLERANCE, err_msg=name)
    return len(groups)
