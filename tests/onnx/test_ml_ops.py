"""ai.onnx.ml's Binarizer and ArrayFeatureExtractor against ONNX's reference evaluator, on shapes and indices the
node cases do not reach (3-D data, a 1-D input, 2-D indices)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import luminal as lm
import luminal.onnx

ML = "ai.onnx.ml"


def _run_both(node, inputs: dict[str, np.ndarray], out_shape):
    values = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()
    ]
    graph = helper.make_graph([node], "g", values, [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(ML, 3), helper.make_opsetid("", 21)])
    want = ReferenceEvaluator(model).run(None, inputs)[0]
    got = lm.run(luminal.onnx.load(model), inputs)["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threshold", [None, 0.25])
def test_binarizer(threshold):
    attrs = {} if threshold is None else {"threshold": threshold}
    x = np.array([[-1.0, 0.0, 0.25, 0.3], [np.nan, 2.0, -0.0, 0.26]], np.float32)
    _run_both(helper.make_node("Binarizer", ["x"], ["y"], domain=ML, **attrs), {"x": x}, [2, 4])


@pytest.mark.parametrize(
    "shape, indices, out",
    [((2, 3, 5), np.array([4, 0, 4], np.int64), [2, 3, 3]), ((5,), np.array([1, 3]), [1, 2]),
     ((3, 4), np.array([[0, 3], [2, 2]], np.int64), [3, 4])],
)  # fmt: skip
def test_array_feature_extractor(shape, indices, out):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    _run_both(node, {"x": x, "i": indices}, out)
