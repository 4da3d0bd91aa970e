"""BatchPolicy's validation and BatchLayout read from real signatures (luminal.graph_json of real graphs)."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.batching.layout import BatchLayout
from luminal.batching.policy import BatchPolicy
from luminal.graph_json import signature, symbol_table
from luminal.scheduler.work import InferenceRequest
from tests.gateway.conftest import tiny_graph


def layout_of(g: lm.Graph, buckets=None) -> BatchLayout | None:
    return BatchLayout.from_signature(signature(g), symbol_table(g), buckets)


def test_policy_accepts_good_settings_and_caps_the_size_to_the_largest_bucket():
    assert BatchPolicy(8, 0.005).buckets is None
    capped = BatchPolicy(16, 0.0, (1, 2, 4, 8))
    assert (capped.max_batch_size, capped.buckets) == (8, (1, 2, 4, 8))
    assert BatchPolicy(4, 0.01, [2, 8]).buckets == (2, 8)  # a list is taken as a tuple
    policy = BatchPolicy.from_deployment(max_batch_size=8, max_queue_delay_ms=5)
    assert (policy.max_batch_size, policy.max_queue_delay_s) == (8, 0.005)


@pytest.mark.parametrize(
    "args,message",
    [
        ((0, 0.0), "max_batch_size must be a positive integer"),
        ((True, 0.0), "max_batch_size must be a positive integer"),
        ((2.5, 0.0), "max_batch_size must be a positive integer"),
        ((4, -0.001), "max_queue_delay_s must be a finite number"),
        ((4, float("nan")), "max_queue_delay_s must be a finite number"),
        ((4, 0.0, ()), "at least one batch size"),
        ((4, 0.0, (4, 2)), "strictly increasing"),
        ((4, 0.0, (2, 2, 4)), "strictly increasing"),
        ((4, 0.0, (0, 4)), "positive integers"),
    ],
)
def test_policy_rejects_bad_settings_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        BatchPolicy(*args)


def test_tiny_graph_batches_on_its_batch_symbol():
    layout = layout_of(tiny_graph())
    assert layout == BatchLayout(symbol="batch", min_rows=1, max_rows=64, buckets=None)
    assert layout.padded_size(5) == 5  # no buckets: any size, no padding
    with_buckets = layout_of(tiny_graph(), buckets=[4, 16])
    assert [with_buckets.padded_size(n) for n in (1, 4, 5, 16)] == [4, 4, 16, 16]
    with pytest.raises(ValueError, match="exceeds the largest compiled batch size 16"):
        with_buckets.padded_size(17)


def test_symbol_minimum_pads_small_batches():
    g = lm.Graph()
    g.input("x", (lm.sym("n", 4, 32), 2)).exp().output("y")
    layout = layout_of(g)
    assert (layout.min_rows, layout.max_rows, layout.padded_size(1), layout.padded_size(6)) == (4, 32, 4, 6)


def _graph(input_shapes, output_of):
    g = lm.Graph()
    xs = [g.input(f"x{i}", shape) for i, shape in enumerate(input_shapes)]
    output_of(*xs).output("y")
    return g


@pytest.mark.parametrize(
    "case",
    ["fixed leading dim", "symbol not leading", "two symbols", "symbol twice", "output loses the batch"],
)
def test_unbatchable_signatures_give_none(case):
    b, s = lm.sym("b", 1, 8), lm.sym("s", 1, 8)
    graphs = {
        "fixed leading dim": lambda: _graph([(3, 2)], lambda x: x * 2),
        "symbol not leading": lambda: _graph([(2, b)], lambda x: x * 2),
        "two symbols": lambda: _graph([(b, 2), (s, 2)], lambda x, y: x * 2),
        "symbol twice": lambda: _graph([(b, b)], lambda x: x * 2),
        "output loses the batch": lambda: _graph([(b, 2)], lambda x: x.sum(0)),
    }
    assert layout_of(graphs[case]()) is None


def test_compiled_buckets_outside_the_symbol_range_are_refused():
    with pytest.raises(ValueError, match=r"within \[1, 64\]"):
        layout_of(tiny_graph(), buckets=[8, 128])


def test_rows_of_a_request():
    layout = layout_of(tiny_graph())
    request = lambda **inputs: InferenceRequest(1, 1, inputs)
    assert layout.rows_of(request(x=np.zeros((3, 4), np.float32))) == 3
    assert layout.rows_of(request(x=np.zeros((2, 4)), z=np.zeros((3, 4)))) is None  # extents disagree
    assert layout.rows_of(request(x=np.float32(1))) is None  # no batch axis
    assert layout.rows_of(request(x=np.zeros((0, 4)))) is None
