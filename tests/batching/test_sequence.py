"""Sequence padding in the batcher, number for number: grouping by length bucket, padding with the declared
values to the group's longest, cutting following output dims back, and no padding without declarations."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.batching.assemble import BatchContractError, assemble, compatible_groups, split
from luminal.batching.layout import BatchLayout
from luminal.batching.sequence import powers_of_two
from luminal.graph_json import signature, symbol_table
from luminal.scheduler.work import InferenceRequest


def graph(padded: bool = True) -> lm.Graph:
    g = lm.Graph()
    b, s = lm.sym("b", max=16), lm.sym("s", max=40)
    ids = g.input("ids", (b, s), lm.int64, pad={1: 9} if padded else None)
    mask = g.input("mask", (b, s), lm.int64, pad={1: 0} if padded else None)
    (ids * mask).output("masked")  # [b, s]: follows s
    mask.sum(1).output("count")  # [b]: nothing follows
    return g


def layout_of(g: lm.Graph, **kw) -> BatchLayout:
    return BatchLayout.from_signature(signature(g), symbol_table(g), **kw)


def req(length: int, rows: int = 1, first: int = 1) -> InferenceRequest:
    ids = (first + np.arange(rows * length)).reshape(rows, length).astype(np.int64)
    return InferenceRequest(1, 1, {"ids": ids, "mask": np.ones((rows, length), np.int64)})


def test_powers_of_two_end_at_the_symbols_maximum():
    assert powers_of_two(40, start=1) == (1, 2, 4, 8, 16, 32, 40)
    assert powers_of_two(1, start=1) == (1,)
    assert powers_of_two(512) == (32, 64, 128, 256, 512)  # the default starts at 32 tokens
    assert powers_of_two(20) == (20,)


def test_requests_group_by_length_bucket_in_queue_order():
    layout = layout_of(graph(), length_buckets=(1, 2, 4, 8, 16, 32))
    a, b, c, d, e = req(5), req(3), req(8), req(33), req(2)
    groups = compatible_groups([a, b, c, d, e], layout)
    # buckets 8 (5, 8), 4 (3), 40 (33), 2 (2)
    assert [[r.id for r in group] for group in groups] == [[a.id, c.id], [b.id], [d.id], [e.id]]
    default = compatible_groups([a, b, c, d, e], layout_of(graph()))  # buckets 32 and 40
    assert [[r.id for r in group] for group in default] == [[a.id, b.id, c.id, e.id], [d.id]]


def test_a_group_is_padded_to_its_longest_with_the_declared_values_and_cut_back():
    layout = layout_of(graph(), length_buckets=(16,))
    short, long = req(2, rows=2, first=100), req(5)
    batch = assemble([short, long], layout, buckets=(4,))
    assert batch.padded_lengths == {"s": 5} and batch.lengths == ({"s": 2}, {"s": 5})
    ids, mask = batch.inputs["ids"], batch.inputs["mask"]
    assert ids.shape == mask.shape == (4, 5)  # 3 real rows padded to the bucket of 4 with the last row
    np.testing.assert_array_equal(ids[:2, 2:], 9)
    np.testing.assert_array_equal(mask[:2, 2:], 0)
    np.testing.assert_array_equal(ids[:2, :2], short.inputs["ids"])
    outputs = {"masked": ids * mask, "count": mask.sum(1)}
    got_short, got_long = split(batch, outputs)
    np.testing.assert_array_equal(got_short["masked"], short.inputs["ids"])  # [2, 2], not [2, 5]
    np.testing.assert_array_equal(got_short["count"], [2, 2])
    np.testing.assert_array_equal(got_long["masked"], long.inputs["ids"])
    np.testing.assert_array_equal(got_long["count"], [5])


def test_an_output_that_breaks_the_declaration_is_a_contract_error():
    layout = layout_of(graph(), length_buckets=(16,))
    batch = assemble([req(2), req(5)], layout)
    with pytest.raises(BatchContractError, match="'masked' dim 1 is 4, but the batch padded 's' to 5"):
        split(batch, {"masked": np.zeros((2, 4), np.int64), "count": np.zeros(2, np.int64)})


def test_without_declarations_different_lengths_never_share_a_batch():
    layout = layout_of(graph(padded=False))
    assert layout.padding is None
    a, b, c = req(5), req(3), req(5)
    assert [[r.id for r in group] for group in compatible_groups([a, b, c], layout)] == [[a.id, c.id], [b.id]]
    with pytest.raises(ValueError, match="does not match the batch"):
        assemble([a, b], layout)


def test_a_request_whose_inputs_disagree_on_the_length_runs_alone():
    layout = layout_of(graph(), length_buckets=(4,))
    odd = InferenceRequest(1, 1, {"ids": np.ones((1, 4), np.int64), "mask": np.ones((1, 3), np.int64)})
    four, three = req(4), req(3)
    groups = compatible_groups([four, odd, three], layout)
    assert [[r.id for r in group] for group in groups] == [[four.id, three.id], [odd.id]]  # 3 and 4: bucket 4
    assert layout.padding.lengths_of(odd) is None


def test_padding_the_batch_symbol_gives_no_sequence_padding():
    g = lm.Graph()
    x = g.input("x", (lm.sym("b"), 3), pad={0: 0.0})
    (x * 2).output("y")
    assert layout_of(g).padding is None


def test_bad_length_buckets_are_refused():
    with pytest.raises(ValueError, match="length buckets must be increasing"):
        layout_of(graph(), length_buckets=(8, 4))
