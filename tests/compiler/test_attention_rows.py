"""Attention over a few query rows (a decode step's one) computes its scores as dot products of the key rows
(compiler/cpu/codegen_attention.py: DOT_ROWS), read in place where the keys and values are a plain load with
adjacent elements and copied row by row where they are not (a transposed input), with no transposed key block:
each equals the reference interpreter, over key counts of one block, several and a partial one, and a head size
that is not a whole vector."""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.hl.movement import transpose

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("rows, keys, head", [(1, 49, 64), (1, 130, 12), (3, 70, 32)])
@pytest.mark.parametrize("strided", [False, True])
def test_few_rows_score_key_rows_in_place(rows, keys, head, strided):
    kv = (2, 3, head, keys) if strided else (2, 3, keys, head)
    shapes = {"q": (2, 3, rows, head), "k": kv, "v": kv}
    g = lm.Graph()
    q, k, v = (g.input(name, shape) for name, shape in shapes.items())
    if strided:  # rows whose elements are not adjacent: copied into the task's blocks
        k, v = transpose(k, 2, 3), transpose(v, 2, 3)
    F.scaled_dot_product_attention(q, k, v).output("o")
    program = lm.compile(g, target="cpu")
    feed = {name: RNG.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    np.testing.assert_allclose(program.run(feed)["o"], lm.run(g, feed)["o"], rtol=1e-5, atol=1e-5)
    source = program.source
    assert "lm_att_dots(_trows" in source and "lm_att_scores(_trows" not in source  # no transposed key block
    assert ("_tkt[_tj" in source) == strided  # key rows copied only where they are not adjacent
