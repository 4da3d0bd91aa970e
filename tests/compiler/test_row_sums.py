"""Gathered sums with their loops swapped (compiler/cpu/row_sums.py): a multi-LoRA product, alone and added to a
projection, compiled for the CPU, equals the reference interpreter and a float64 numpy product; the stacks' rows
are read in place (one range check per row, no per-element gather); a slot outside the stacks is an error, as
an out-of-range gather is."""

import numpy as np
import pytest

import luminal as lm
from luminal.hl.indexing import index_select

ROWS, IN, RANK, OUT, SLOTS = 5, 48, 8, 40, 3


W = np.random.default_rng(1).standard_normal((IN, OUT)).astype(np.float32)


def lora_graph(with_projection: bool) -> lm.Graph:
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch"), 1, IN))
    a = g.input("A", (SLOTS, IN, RANK))
    b = g.input("B", (SLOTS, RANK, OUT))
    slot = g.input("slot", (lm.sym("batch"),), lm.int64)
    y = (x @ index_select(a, 0, slot)) @ index_select(b, 0, slot)
    if with_projection:
        y = (x @ g.weight("w", (IN, OUT))).relu() + y
    y.output("y")
    if with_projection:
        g.bind({"w": W})
    return g


def feed(slots: list[int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((len(slots), 1, IN)).astype(np.float32),
        "A": rng.standard_normal((SLOTS, IN, RANK)).astype(np.float32),
        "B": rng.standard_normal((SLOTS, RANK, OUT)).astype(np.float32),
        "slot": np.array(slots, np.int64),
    }


@pytest.mark.parametrize("with_projection", [False, True])
def test_swapped_gathered_sums_match_the_reference(with_projection):
    g = lora_graph(with_projection)
    program = lm.compile(g, target="cpu")
    inputs = feed([0, 1, 2, 1, 0])
    got = program.run(inputs)["y"]
    np.testing.assert_allclose(got, lm.run(g, inputs)["y"], rtol=1e-5, atol=1e-5)
    x, a, b, s = (inputs[k].astype(np.float64) for k in ("x", "A", "B", "slot"))
    s = s.astype(np.int64)
    delta = np.einsum("bti,bir,bro->bto", x, a[s], b[s])
    if with_projection:
        delta += np.maximum(x @ W.astype(np.float64), 0)
    np.testing.assert_allclose(got, delta, rtol=1e-5, atol=1e-4)
    source = program.source
    assert "_trow" in source and "_tbase" in source  # swapped, the stacks' rows read in place
    assert "_tg" not in source  # no gather checked element by element


def test_a_slot_outside_the_stacks_is_an_error():
    program = lm.compile(lora_graph(False), target="cpu")
    with pytest.raises(IndexError):
        program.run(feed([0, SLOTS, 1]))
