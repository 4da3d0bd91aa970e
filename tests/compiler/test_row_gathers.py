"""Gathers along the row resolved once per row, and the row's loop emitted per pattern of its row-wide guards
(compiler/cpu/row_gathers.py): a paged KV read (block-table gather of a pool, then the step's new key appended)
compiled for the CPU equals the reference interpreter, reads each block's run in place, and still fails on a
block outside the pool, as an out-of-range gather does."""

import numpy as np
import pytest

import luminal as lm
from luminal.hl import prim
from luminal.hl.combine import cat
from luminal.nn.models.paged_decoding import _past_index

BLOCKS, HEADS, SIZE, DIM = 6, 2, 4, 8


def paged_read() -> lm.Graph:
    g = lm.Graph()
    batch, row_blocks = lm.sym("batch", max=4), lm.sym("row_blocks", max=3)
    pool = g.input("pool", (BLOCKS, HEADS, SIZE, DIM))
    table = g.input("table", (batch, row_blocks), lm.int64)
    new = g.input("new", (batch, HEADS, 1, DIM))
    cached = prim.gather(pool, _past_index(table, batch, row_blocks, HEADS, SIZE, DIM))
    cat([cached, new * 2.0 + 1.0], dim=2).output("keys")
    return g


def feed(table: list[list[int]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "pool": rng.standard_normal((BLOCKS, HEADS, SIZE, DIM)).astype(np.float32),
        "table": np.array(table, np.int64),
        "new": rng.standard_normal((len(table), HEADS, 1, DIM)).astype(np.float32),
    }


def test_a_paged_read_matches_the_reference_and_reads_runs_in_place():
    g = paged_read()
    program = lm.compile(g, target="cpu")
    inputs = feed([[5, 0, 2], [1, 1, 4], [3, 2, 0]])
    got = program.run(inputs)["keys"]
    np.testing.assert_array_equal(got, lm.run(g, inputs)["keys"])
    pool, table = inputs["pool"], inputs["table"]
    cached = pool[table].transpose(0, 2, 1, 3, 4).reshape(3, HEADS, 3 * SIZE, DIM)
    np.testing.assert_array_equal(got[:, :, :-1], cached)
    source = program.source
    assert "_tbase" in source  # each block's run read from its base, checked once
    assert "_tpick" in source  # the row's loop once per pattern of the concatenation's guards


def test_a_block_outside_the_pool_is_an_error():
    program = lm.compile(paged_read(), target="cpu")
    with pytest.raises(IndexError):
        program.run(feed([[0, 1], [2, BLOCKS]]))
