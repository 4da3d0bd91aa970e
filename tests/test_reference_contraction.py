"""The interpreter's sums of products (runtime/reference_contraction.py): the same values as the op-by-op
Mul then SumReduce, computed without the products, only for float32 and float64 and only where nothing else
reads the Mul."""

import numpy as np
import pytest

import luminal as lm
from luminal.runtime import reference_contraction as contraction


def _op_by_op(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
    return np.add.reduce(np.multiply(a, b), axis=axis)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_matmul_contracts_to_the_sum_of_its_products(dtype):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 5, 7)).astype(dtype), rng.standard_normal((3, 7)).astype(dtype)
    a = np.broadcast_to(x[:, :, None, :], (2, 5, 3, 7))  # the broadcast views a matmul reads
    b = np.broadcast_to(w[None, None], (2, 5, 3, 7))
    got = contraction.sum_of_products(a, b, 3, np.dtype(dtype))
    assert got.dtype == dtype and got.flags.c_contiguous
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-13, "atol": 1e-14}
    np.testing.assert_allclose(got, _op_by_op(a, b, 3), **tolerance)
    np.testing.assert_allclose(got, x @ w.T, **tolerance)


def test_axes_both_operands_broadcast_fall_back_to_the_products():
    rng = np.random.default_rng(1)
    a = np.broadcast_to(rng.standard_normal((1, 4, 1)).astype(np.float32), (3, 4, 5))
    b = np.broadcast_to(rng.standard_normal((1, 1, 1)).astype(np.float32), (3, 4, 5))
    for axis in range(3):  # axis 0 and 2 are broadcast in both; axis 1 leaves both-broadcast axes in the output
        np.testing.assert_allclose(contraction.sum_of_products(a, b, axis, np.dtype(np.float32)),
                                   _op_by_op(a, b, axis), rtol=1e-5, atol=1e-6)  # fmt: skip


def test_infinities_and_nans_propagate_as_the_products_do():
    a = np.array([[np.inf, 1.0], [0.0, 2.0]], np.float32)
    b = np.array([[0.0, 1.0], [np.nan, 3.0]], np.float32)
    got = contraction.sum_of_products(a, b, 1, np.dtype(np.float32))
    assert np.isnan(got).all()


def test_an_empty_axis_sums_to_zero():
    a, b = np.zeros((3, 0), np.float32), np.zeros((3, 0), np.float32)
    np.testing.assert_array_equal(contraction.sum_of_products(a, b, 1, np.dtype(np.float32)), np.zeros(3))


def _matmul_graph(dtype):
    g = lm.Graph()
    x, w = g.input("x", (4, 6), dtype=dtype), g.input("w", (6, 5), dtype=dtype)
    (x @ w).output("y")
    return g


def _fused(g: lm.Graph) -> list:
    return [n for n in g.nodes if contraction.contracts(g, n)]


def test_the_interpreter_contracts_a_float32_matmul_and_keeps_half_types_op_by_op():
    assert len(_fused(_matmul_graph(lm.float32))) == 1
    g = lm.Graph()
    x, w = g.input("x", (4, 6), dtype=lm.float16), g.input("w", (4, 6), dtype=lm.float16)
    (x * w).sum(-1).output("y")
    assert _fused(g) == []  # a float16 product is rounded to float16 before the sum, as the Mul defines
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((6, 5)).astype(np.float32)
    got = lm.run(_matmul_graph(lm.float32), {"x": x, "w": w})["y"]
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-6)


def _shared_or_not(shared: bool) -> lm.Graph:
    g = lm.Graph()
    x, w = g.input("x", (4, 300)), g.input("w", (300, 3))
    (x @ w).output("y")
    product = x * g.input("v", (4, 300))
    product.sum(-1).output("sums")
    if shared:
        product.output("products")
    return g


def test_a_product_something_else_reads_is_written_and_its_sum_is_the_same_bits():
    """A graph's values must not depend on whether equal nodes were merged (the e-graph's round trip merges them):
    the sum of a product another node reads is contracted too."""
    rng = np.random.default_rng(3)
    feed = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
            (("x", (4, 300)), ("w", (300, 3)), ("v", (4, 300)))}  # fmt: skip
    alone, shared = lm.run(_shared_or_not(False), feed), lm.run(_shared_or_not(True), feed)
    assert len(_fused(_shared_or_not(True))) == 2
    np.testing.assert_array_equal(shared["products"], feed["x"] * feed["v"])
    assert shared["sums"].tobytes() == alone["sums"].tobytes()  # 300 terms: summed op by op, the bits differ
    np.testing.assert_allclose(shared["sums"], (feed["x"] * feed["v"]).sum(-1), rtol=1e-5, atol=1e-6)


def test_operand_order_does_not_change_the_bits():
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((3, 1, 8)).astype(np.float32), rng.standard_normal((1, 5, 8)).astype(np.float32)
    a, b = np.broadcast_to(x, (3, 5, 8)), np.broadcast_to(w, (3, 5, 8))
    f32 = np.dtype(np.float32)
    assert contraction.sum_of_products(a, b, 2, f32).tobytes() == contraction.sum_of_products(b, a, 2, f32).tobytes()
