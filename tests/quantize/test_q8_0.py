"""Q8_0 quantisation against a numpy statement of llama.cpp's layout, and its graph meaning."""

import numpy as np
import pytest

import luminal as lm
from luminal.quantize import check_quantize, dequantize, dequantize_q8_0, quantize_q8_0
from luminal.view import ShapeError


def numpy_q8_0(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Q8_0 statement itself, block by block: d = max|x| / 127, q = round-half-even(x / d)."""
    n, k = w.shape
    q, scales = np.zeros((n, k), np.int8), np.zeros((n, k // 32), np.float32)
    for r in range(n):
        for b in range(k // 32):
            x = w[r, 32 * b : 32 * b + 32]
            d = np.float32(np.abs(x).max()) / np.float32(127)
            scales[r, b] = d
            q[r, 32 * b : 32 * b + 32] = np.round(x / d) if d else 0
    return q, scales


def test_quantise_matches_the_block_by_block_statement():
    w = np.random.default_rng(0).standard_normal((5, 96)).astype(np.float32)
    w[1, :32] = 0  # an all-zero block: scale 0, values 0
    w[2, 40] = 7.0  # one large value: it quantises to exactly 127
    q, s = quantize_q8_0(w)
    want_q, want_s = numpy_q8_0(w)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(s, want_s)
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (5, 3)
    assert q[2, 40] == 127 and np.abs(q).max() <= 127
    # Each value is off by at most half its block's scale.
    err = np.abs(dequantize_q8_0(q, s) - w).reshape(5, 3, 32)
    assert (err <= s[..., None] / 2 + 1e-7).all()


def test_rounds_half_to_even():
    w = np.zeros((1, 32), np.float32)
    w[0, :4] = [127.0, 0.5, 1.5, 2.5]  # scale 1: halves round to the even neighbour
    q, s = quantize_q8_0(w)
    assert s[0, 0] == 1 and list(q[0, :4]) == [127, 0, 2, 2]


@pytest.mark.parametrize(
    "bad", [np.zeros((4, 33), np.float32), np.zeros((32,), np.float32), np.zeros((2, 32), np.int32)]
)
def test_refuses_what_is_not_a_float_matrix_of_whole_blocks(bad):
    with pytest.raises(ShapeError, match="Q8_0"):
        quantize_q8_0(bad)


def test_refuses_nan():
    with pytest.raises(ValueError, match="nan"):
        quantize_q8_0(np.full((1, 32), np.nan, np.float32))


def test_graph_dequantise_is_the_numpy_dequantise():
    rng = np.random.default_rng(1)
    q, s = quantize_q8_0(rng.standard_normal((6, 64)).astype(np.float32))
    g = lm.Graph()
    dequantize(g.weight("q", (6, 64), lm.int8), g.weight("s", (6, 2))).output("w")
    g.bind({"q": q, "s": s})
    np.testing.assert_array_equal(lm.run(g, {})["w"], dequantize_q8_0(q, s))


def test_a_stack_quantises_matrix_by_matrix_and_dequantises_in_a_graph():
    """A mixture's experts [experts, N, K]: each matrix as if alone; the graph's dequantize of the stack (or of
    matrices gathered from it) is numpy's."""
    w = np.random.default_rng(2).standard_normal((3, 5, 64)).astype(np.float32)
    q, s = quantize_q8_0(w)
    for e in range(3):
        qe, se = quantize_q8_0(w[e])
        np.testing.assert_array_equal(q[e], qe)
        np.testing.assert_array_equal(s[e], se)
    g = lm.Graph()
    dequantize(g.weight("q", (3, 5, 64), lm.int8), g.weight("s", (3, 5, 2))).output("w")
    g.bind({"q": q, "s": s})
    np.testing.assert_array_equal(lm.run(g, {})["w"], dequantize_q8_0(q, s))
    with pytest.raises(ShapeError, match="scale float32"):
        dequantize(g.weight("q2", (3, 5, 64), lm.int8), g.weight("s2", (5, 2)))


@pytest.mark.parametrize("value", ["int4", "INT8", "fp8", ""])
def test_unknown_schemes_are_refused(value):
    with pytest.raises(ValueError, match="int8"):
        check_quantize(value)
    assert check_quantize(None) is None and check_quantize("int8") == "int8"
