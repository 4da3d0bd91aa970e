"""ai.onnx.preview.training's optimizers (Adagrad, Adam, Momentum) against ONNX's reference evaluator: one imported
graph run at the first step (T = 0, where Adam and Momentum take other branches) and a later one, with every
attribute set; the node cases cover the defaults."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import luminal as lm
import luminal.onnx

DOMAIN = "ai.onnx.preview.training"
SHAPES = [(3, 4), (5,)]  # two optimized tensors in one node
ATTRS = {
    "Adagrad": {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01},
    "Adam": {"alpha": 0.8, "beta": 0.9, "epsilon": 1e-3, "norm_coefficient": 0.01, "norm_coefficient_post": 0.02},
    "Momentum": {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01},
    "Nesterov": {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.01},
}
STATES = {"Adagrad": ["H"], "Adam": ["V", "H"], "Momentum": ["V"], "Nesterov": ["V"]}


def _model(kind: str):
    op = "Momentum" if kind == "Nesterov" else kind
    groups = ["X", "G", *STATES[kind]]
    inputs = ["R", "T"] + [f"{p}{i}" for p in groups for i in range(len(SHAPES))]
    outputs = [f"{p}{i}_new" for p in ["X", *STATES[kind]] for i in range(len(SHAPES))]
    value = helper.make_tensor_value_info
    values = [value("R", TensorProto.FLOAT, []), value("T", TensorProto.INT64, [])]
    values += [value(f"{p}{i}", TensorProto.FLOAT, s) for p in groups for i, s in enumerate(SHAPES)]
    outs = [value(n, TensorProto.FLOAT, SHAPES[int(n.split("_")[0][-1])]) for n in outputs]
    node = helper.make_node(op, inputs, outputs, domain=DOMAIN, **ATTRS[kind])
    graph = helper.make_graph([node], kind.lower(), values, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(DOMAIN, 1)]), inputs, outputs


@pytest.mark.parametrize("kind", list(ATTRS))
def test_optimizer_steps_match_onnx_reference(kind):
    model, inputs, outputs = _model(kind)
    graph = luminal.onnx.load(model)
    rng = np.random.default_rng(0)
    tensors = {n: rng.uniform(0.1, 1.0, SHAPES[int(n[-1])]).astype(np.float32) for n in inputs[2:]}
    for t in (0, 3):
        feed = {"R": np.array(0.1, np.float32), "T": np.array(t, np.int64), **tensors}
        want = ReferenceEvaluator(model).run(None, feed)
        got = lm.run(graph, feed)
        for name, w in zip(outputs, want):
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=f"{kind} {name} at T={t}")
