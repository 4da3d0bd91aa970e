"""The importer's contract: inputs, weights, symbols and outputs by name; known values read at import; every
failure a clear OnnxImportError naming its cause, malformed and non-ONNX files included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import luminal as lm
import luminal.onnx
from luminal.onnx import OnnxDynamicInputError, OnnxImportError, OnnxUnsupportedError

ROOT = Path(__file__).resolve().parents[2]


def _model(nodes, inputs, outputs, initializers=(), opset=18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _mlp() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "fc.weight")
    shape = numpy_helper.from_array(np.array([-1, 3], dtype=np.int64), "shape")
    return _model(
        [
            helper.make_node("MatMul", ["x", "fc.weight"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("Reshape", ["r", "shape"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [w, shape],
    )


def test_inputs_weights_symbols_and_outputs():
    graph = luminal.onnx.load(_mlp())
    assert list(graph.inputs) == ["x"] and list(graph.outputs) == ["y"]
    assert list(graph.weights) == ["fc.weight"] and "batch" in graph.symbols
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    np.testing.assert_allclose(lm.run(graph, {"x": x})["y"], np.maximum(x @ w, 0), rtol=1e-6)


def test_loads_from_a_path_and_bytes_and_saves_as_lgraph(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), path)
    for source in (path, str(path), path.read_bytes()):
        assert list(luminal.onnx.load(source).outputs) == ["y"]
    out = tmp_path / "mlp.lgraph"
    done = subprocess.run([sys.executable, str(ROOT / "examples/onnx_to_lgraph.py"), str(path), str(out)], text=True,
                          capture_output=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "input  x: float32(batch, 4)" in done.stdout
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(lm.run(lm.load(out), {"x": x})["y"], lm.run(luminal.onnx.load(path), {"x": x})["y"])


def test_unsupported_operators_are_all_named_at_once():
    model = _model(
        [helper.make_node("Unique", ["x"], ["u"]), helper.make_node("NonZero", ["u"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1, None])],
    )
    with pytest.raises(OnnxUnsupportedError, match="NonZero, Unique") as info:
        luminal.onnx.load(model)
    assert info.value.operators == ("NonZero", "Unique")


def test_unsupported_attribute_and_dtype_are_named():
    ratio = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "ratio")
    training = numpy_helper.from_array(np.array(True), "training")
    model = _model(
        [helper.make_node("Dropout", ["x", "ratio", "training"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [ratio, training],
    )
    with pytest.raises(OnnxUnsupportedError, match="Dropout: training_mode=True is not supported"):
        luminal.onnx.load(model)
    complex64 = _model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.COMPLEX64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.COMPLEX64, [2])],
    )
    with pytest.raises(OnnxUnsupportedError, match="'x': element type COMPLEX64 is not supported"):
        luminal.onnx.load(complex64)


def test_a_dynamic_shape_input_is_named_and_can_be_fixed():
    model = _model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
    )  # fmt: skip
    with pytest.raises(OnnxDynamicInputError, match=r"Reshape .*input 1 \(shape, 'shape'\)") as info:
        luminal.onnx.load(model)
    assert info.value.inputs == ("shape",)
    graph = luminal.onnx.load(model, constant_inputs={"shape": np.array([3, 2])})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(lm.run(graph, {"x": x})["y"], x.reshape(3, 2))


@pytest.mark.parametrize(
    "data",
    [b"", b"not an onnx model at all", b"\x08\x07\x12\xff\xff\xff\xff\x0f", bytes(range(256)) * 4],
    ids=["empty", "text", "truncated", "noise"],
)
def test_malformed_files_raise_a_clear_error(tmp_path, data):
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    with pytest.raises(OnnxImportError, match="not an ONNX model|not a valid ONNX model"):
        luminal.onnx.load(path)


def test_structurally_broken_models_raise_a_clear_error(tmp_path):
    dangling = _model(
        [helper.make_node("Relu", ["nowhere"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(OnnxImportError, match="not a valid ONNX model"):
        luminal.onnx.load(dangling)
    with pytest.raises(OnnxImportError, match="no such file"):
        luminal.onnx.load(tmp_path / "missing.onnx")
    with pytest.raises(TypeError):
        luminal.onnx.load(12)


def test_huge_constants_are_not_allocated_at_import():
    """An Expand or ConstantOfShape of a constant to 2^40 elements stays a view: import neither folds nor
    allocates it (a hostile model cannot exhaust memory by its constants' shapes)."""
    huge = numpy_helper.from_array(np.array([1 << 20, 1 << 20], dtype=np.int64), "huge")
    one = numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one")
    model = _model(
        [
            helper.make_node("Expand", ["one", "huge"], ["big"]),
            helper.make_node("ConstantOfShape", ["huge"], ["zeros"]),
            helper.make_node("Add", ["big", "zeros"], ["sum"]),
            helper.make_node("ReduceMax", ["sum"], ["y"], keepdims=0),
        ],
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [huge, one],
    )
    graph = luminal.onnx.load(model)
    assert list(graph.outputs) == ["y"] and not graph.inputs
