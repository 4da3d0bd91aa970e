"""Shape arithmetic on symbolic dims, op by op, as the torch exporters write it: each graph imports once and
matches ONNX Runtime at two sizes, so nothing was fixed to the first size at import."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import luminal as lm
from luminal.onnx import symbolic

BUFFER = 16  # a registered buffer's length, like BERT's 512 position ids


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _model() -> onnx.ModelProto:
    """From x [batch, seq, 4]: a buffer sliced to seq plus a Range over seq, expanded and tiled to
    [batch, seq] (Expand's target read through Equal/Where as torch's expand(-1, ...) writes it), a
    ConstantOfShape of it, and x cut to its first max(seq // 2, 2) positions."""
    node = helper.make_node
    nodes = [
        node("Shape", ["x"], ["shape"]),
        node("Gather", ["shape", "zero"], ["batch"], axis=0),
        node("Gather", ["shape", "one"], ["seq"], axis=0),
        node("Unsqueeze", ["batch", "axis0"], ["batch1"]),
        node("Unsqueeze", ["seq", "axis0"], ["seq1"]),
        node("Slice", ["positions", "zero1", "seq1", "one1"], ["ids"]),  # [1, seq]
        node("Range", ["zero", "seq", "one"], ["steps"]),  # [seq]
        node("Add", ["ids", "steps"], ["summed"]),
        node("Concat", ["minus1", "seq1"], ["wanted"], axis=0),  # [-1, seq]
        node("Equal", ["wanted", "minus_ones"], ["keep"]),
        node("Concat", ["batch1", "seq1"], ["full"], axis=0),
        node("Where", ["keep", "full", "wanted"], ["target"]),  # [batch, seq]
        node("Expand", ["summed", "target"], ["expanded"]),
        node("Concat", ["batch1", "one1"], ["repeats"], axis=0),
        node("Tile", ["ids", "repeats"], ["tiled"]),
        node("ConstantOfShape", ["target"], ["ones"], value=_ints("v", [1])),
        node("Add", ["expanded", "tiled"], ["partial"]),
        node("Add", ["partial", "ones"], ["indices"]),
        node("Div", ["seq1", "two1"], ["half"]),
        node("Max", ["half", "two1"], ["some"]),
        node("Slice", ["x", "zero1", "some", "one1"], ["head"]),  # x[:, :max(seq // 2, 2)]
        node("Cast", ["steps"], ["ramp"], to=TensorProto.FLOAT),
    ]
    constants = [
        numpy_helper.from_array(np.arange(BUFFER, dtype=np.int64).reshape(1, BUFFER), "positions"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
        *(_ints(name, v) for name, v in [("axis0", [0]), ("zero1", [0]), ("one1", [1]), ("two1", [2])]),
        _ints("minus1", [-1]),
        _ints("minus_ones", [-1, -1]),
    ]
    outputs = [
        helper.make_tensor_value_info("indices", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("head", TensorProto.FLOAT, ["batch", None, 4]),
        helper.make_tensor_value_info("ramp", TensorProto.FLOAT, ["seq"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
    graph = helper.make_graph(nodes, "shapes", [x], outputs, initializer=constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_shape_arithmetic_stays_symbolic():
    model = _model()
    graph = lm.onnx.load(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert graph.symbols["seq"].hi == BUFFER  # the buffer sliced to seq bounds it
    rng = np.random.default_rng(0)
    for batch, seq in [(2, 5), (3, 8)]:
        feed = {"x": rng.standard_normal((batch, seq, 4)).astype(np.float32)}
        got = lm.run(graph, feed)
        for name, want in zip(["indices", "head", "ramp"], session.run(None, feed)):
            assert got[name].shape == want.shape, name
            np.testing.assert_array_equal(got[name], want, err_msg=name)


def test_comparisons_of_shape_values_fold_where_the_ranges_decide_them():
    seq = lm.sym("seq", 1, 16)
    shape = symbolic.shape_value([seq, 4])
    assert symbolic.fold("Greater", {}, [shape, np.array([0, 4])], 18)[0].tolist() == [True, False]
    assert symbolic.fold("LessOrEqual", {}, [shape, np.array([16, 3])], 18)[0].tolist() == [True, False]
    assert symbolic.fold("Equal", {}, [shape, np.array([17, 4])], 18)[0].tolist() == [False, True]
    assert symbolic.fold("Less", {}, [shape, np.array([8, 8])], 18) is None  # seq < 8 depends on seq: the graph's
