"""Grouping, padding and un-padding, checked number for number; and a real program run on an assembled batch
gives each request exactly what it gets when run alone."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.batching.assemble import BatchContractError, assemble, compatible_groups, split
from luminal.batching.layout import BatchLayout
from luminal.graph_json import signature, symbol_table
from luminal.scheduler.work import InferenceRequest
from tests.gateway.conftest import tiny_graph

LAYOUT = BatchLayout("batch", 1, 64)


def req(rows: int, start: float = 0.0, features: int = 4, dtype=np.float32, **extra) -> InferenceRequest:
    x = (start + np.arange(rows * features)).reshape(rows, features).astype(dtype)
    return InferenceRequest(7, 1, {"x": x, **extra})


def test_compatible_groups_split_by_dtype_and_dims_keeping_queue_order():
    a, b = req(1, 0), req(2, 10)
    wide = req(1, features=5)
    ints = req(3, dtype=np.int32)
    c = req(1, 20)
    extra_input = req(1, m=np.ones((1, 2), np.float32))
    groups = compatible_groups([a, wide, b, ints, c, extra_input])
    assert [[r.id for r in g] for g in groups] == [[a.id, b.id, c.id], [wide.id], [ints.id], [extra_input.id]]


def test_assemble_concatenates_and_pads_with_the_last_real_row():
    first, second = req(2, 0), req(3, 100)
    batch = assemble([first, second], LAYOUT, buckets=(4, 8))
    assert (batch.rows, batch.padded_rows, batch.row_ranges) == (5, 8, ((0, 2), (2, 5)))
    assert batch.request_ids == (first.id, second.id) and batch.request_rows == (2, 3)
    x = batch.inputs["x"]
    np.testing.assert_array_equal(x[:2], first.inputs["x"])
    np.testing.assert_array_equal(x[2:5], second.inputs["x"])
    for padding_row in x[5:]:
        np.testing.assert_array_equal(padding_row, second.inputs["x"][-1])
    assert x.dtype == np.float32 and x.shape == (8, 4)


def test_no_buckets_means_no_padding_and_split_gives_back_each_requests_rows():
    requests = [req(1, 0), req(3, 50), req(2, 90)]
    batch = assemble(requests, LAYOUT)
    assert batch.padded_rows == 6
    outputs = {"y": batch.inputs["x"] * 2, "s": batch.inputs["x"].sum(1)}
    parts = split(batch, outputs)
    assert len(parts) == 3
    for request, part in zip(requests, parts):
        np.testing.assert_array_equal(part["y"], request.inputs["x"] * 2)
        np.testing.assert_array_equal(part["s"], request.inputs["x"].sum(1))


def test_split_strips_padding():
    requests = [req(1, 0), req(2, 30)]
    batch = assemble(requests, LAYOUT, buckets=(8,))
    parts = split(batch, {"y": batch.inputs["x"] + 1})
    assert [p["y"].shape for p in parts] == [(1, 4), (2, 4)]
    np.testing.assert_array_equal(parts[1]["y"], requests[1].inputs["x"] + 1)


@pytest.mark.parametrize("shape", [(5, 4), (16, 4), ()])
def test_split_refuses_outputs_that_broke_the_batch_contract(shape):
    batch = assemble([req(2), req(6)], LAYOUT)
    with pytest.raises(BatchContractError, match=r"output 'y' .* the batch ran 8 rows"):
        split(batch, {"y": np.zeros(shape, np.float32)})


def test_assemble_refuses_what_cannot_be_one_batch():
    with pytest.raises(ValueError, match="empty batch"):
        assemble([], LAYOUT)
    odd = req(1, dtype=np.float64)
    with pytest.raises(ValueError, match=f"request {odd.id} does not match"):
        assemble([req(1), odd], LAYOUT)
    with pytest.raises(ValueError, match="exceeds the largest compiled batch size 4"):
        assemble([req(3), req(2)], LAYOUT, buckets=(2, 4))


def test_a_real_program_on_a_padded_batch_matches_each_request_run_alone():
    g = tiny_graph()
    layout = BatchLayout.from_signature(signature(g), symbol_table(g), buckets=[8])
    rng = np.random.default_rng(1)
    requests = [InferenceRequest(1, 1, {"x": rng.standard_normal((n, 4)).astype(np.float32)}) for n in (1, 3, 2)]
    batch = assemble(requests, layout)
    assert batch.padded_rows == 8
    parts = split(batch, lm.run(g, batch.inputs))
    for request, part in zip(requests, parts):
        np.testing.assert_allclose(part["probs"], lm.run(g, request.inputs)["probs"], rtol=1e-6)
