"""Translators on cases ONNX's node tests reach only in one element type (their CumSum and CumProd cases are all
float64), checked here in float32 against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import luminal as lm
import luminal.onnx


def _scan_model(op: str, axis: int, exclusive: int, reverse: int):
    node = helper.make_node(op, ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    graph = helper.make_graph(
        [node],
        "scan",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        initializer=[numpy_helper.from_array(np.array(axis, dtype=np.int64), "axis")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])


def _expected(fn, identity: float, x: np.ndarray, axis: int, exclusive: int, reverse: int) -> np.ndarray:
    y = np.flip(x, axis) if reverse else x
    y = fn(y, axis=axis)
    if exclusive:  # shift one step along the axis, the identity coming in first
        y = np.concatenate([np.full_like(np.take(y, [0], axis=axis), identity), np.delete(y, -1, axis=axis)], axis)
    return np.flip(y, axis) if reverse else y


@pytest.mark.parametrize("op, fn, identity", [("CumSum", np.cumsum, 0.0), ("CumProd", np.cumprod, 1.0)])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_scans_match_numpy(op, fn, identity, axis, exclusive, reverse):
    x = np.random.default_rng(0).uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    graph = luminal.onnx.load(_scan_model(op, axis, exclusive, reverse))
    got = lm.run(graph, {"x": x})["y"]
    np.testing.assert_allclose(got, _expected(fn, identity, x, axis, exclusive, reverse), rtol=1e-5)


def test_uint64_bit_operations_above_the_signed_range():
    """uint64 values from 2^63 up shift right and split into bits exactly (through uint64 division), against
    numpy. Interpreted only: 64 bits of uint64 quotients make a graph the compiler takes minutes over (the
    quotient's C is checked by tests/ops/test_integer_dtypes.py)."""
    a = np.array([2**64 - 1, 2**63, 2**63 + 12345, 5, 2**64 - 2, 2**63 + 7], dtype=np.uint64)
    b = np.array([3, 1, 63, 2, 2**63 + 1, 2**64 - 3], dtype=np.uint64)
    shift = np.array([3, 1, 63, 2, 0, 60], dtype=np.uint64)
    ops = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}
    nodes = [helper.make_node("BitShift", ["a", "s"], ["shifted"], direction="RIGHT")]
    nodes += [helper.make_node(op, ["a", "b"], [op]) for op in ops]
    info = lambda name: helper.make_tensor_value_info(name, TensorProto.UINT64, [a.size])  # noqa: E731
    graph = helper.make_graph(nodes, "bits", [info("a"), info("s"), info("b")], [info(n.output[0]) for n in nodes])
    g = luminal.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    feed = {"a": a, "s": shift, "b": b}
    want = {"shifted": a >> shift} | {op: fn(a, b) for op, fn in ops.items()}
    got = lm.run(g, feed)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
