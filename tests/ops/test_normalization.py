"""Softmax and the normalizations against PyTorch: dims (negative, symbolic), half precision, -inf entries,
affine parameters, eps defaults, per-channel statistics, Lp norms, and the errors."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as tF

import luminal as lm
from luminal import functional as F
from tests.opcheck import check


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_dims(dim):
    # dim 0 runs the symbolic variant over the reduced dim itself
    check("softmax", lambda a: a.softmax(dim), lambda a: a.softmax(dim), shapes=[(5, 3, 4)], reduction=True)
    check("log_softmax", lambda a: a.log_softmax(dim), lambda a: F.log_softmax(a, dim), [(5, 3, 4)], reduction=True)


@pytest.mark.filterwarnings("ignore:invalid value")  # -inf - (-inf) = nan in the all -inf row, as in torch
def test_softmax_large_and_infinite_inputs():
    a = np.array([[1000.0, 999.0, -1000.0], [-np.inf, 0.0, 1.0], [-np.inf, -np.inf, -np.inf]], np.float32)
    check("softmax", lambda t: t.softmax(-1), lambda t: t.softmax(-1), inputs=[a], symbolic=False)
    check("log_softmax", lambda t: t.log_softmax(-1), lambda t: t.log_softmax(-1), inputs=[a[:2]])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_softmax_half(dtype):
    check("softmax", lambda a: a.softmax(-1), lambda a: a.softmax(-1), shapes=[(4, 16)], dtype=dtype, low=-6, high=6)
    check("log_softmax", lambda a: a.log_softmax(0), lambda a: a.log_softmax(0), shapes=[(6, 5)], dtype=dtype)


def test_softmax_dtype_argument_and_integer_input():
    check(
        "softmax",
        lambda a: tF.softmax(a, 1, dtype=torch.float32),
        lambda a: F.softmax(a, 1, dtype="float32"),
        [(3, 4)],
        dtype="float16",
    )
    check(
        "softmax",
        lambda a: tF.softmax(a.float(), -1),  # torch refuses integer softmax; luminal computes it in float32
        lambda a: a.softmax(-1),
        shapes=[(3, 4)],
        dtype="int64",
        low=-3,
        high=3,
    )


def test_layer_norm():
    ln = tF.layer_norm
    check(
        "layer_norm",
        lambda a, w, b: ln(a, (5,), w, b),
        lambda a, w, b: F.layer_norm(a, (5,), w, b),
        [(3, 4, 5), (5,), (5,)],
        reduction=True,
    )
    check(
        "layer_norm",
        lambda a: ln(a, (4, 5), eps=1e-3),
        lambda a: F.layer_norm(a, (4, 5), eps=1e-3),
        [(3, 4, 5)],
        reduction=True,
    )
    check("layer_norm", lambda a, w: ln(a, [5], w), lambda a, w: F.layer_norm(a, 5, w), [(6, 5), (5,)], reduction=True)
    # a 1-D input: the symbolic variant normalizes over a symbolic length (the mean divides by an Iota)
    check("layer_norm", lambda a: ln(a, a.shape), lambda a: F.layer_norm(a, a.shape), [(7,)], reduction=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm_half(dtype):
    check(
        "layer_norm",
        lambda a, w, b: tF.layer_norm(a, (8,), w, b),
        lambda a, w, b: F.layer_norm(a, (8,), w, b),
        [(3, 8), (8,), (8,)],
        dtype=dtype,
    )


def test_rms_norm():
    rms = tF.rms_norm
    check(
        "rms_norm", lambda a, w: rms(a, (5,), w), lambda a, w: F.rms_norm(a, (5,), w), [(3, 4, 5), (5,)], reduction=True
    )
    check(
        "rms_norm",
        lambda a: rms(a, (4, 5), eps=1e-2),
        lambda a: F.rms_norm(a, (4, 5), eps=1e-2),
        [(3, 4, 5)],
        reduction=True,
    )
    tiny = np.full((2, 3), 1e-4, np.float32)  # mean(x^2) = 1e-8 is comparable to the default eps (float32's)
    check("rms_norm", lambda a: rms(a, (3,)), lambda a: F.rms_norm(a, (3,)), inputs=[tiny], reduction=True)
    check(
        "rms_norm", lambda a, w: rms(a, (8,), w), lambda a, w: F.rms_norm(a, (8,), w), [(3, 8), (8,)], dtype="bfloat16"
    )


def test_group_norm():
    gn = tF.group_norm
    check(
        "group_norm",
        lambda a, w, b: gn(a, 2, w, b),
        lambda a, w, b: F.group_norm(a, 2, w, b),
        [(2, 4, 3, 3), (4,), (4,)],
        reduction=True,
    )
    check("group_norm", lambda a: gn(a, 3), lambda a: F.group_norm(a, 3), [(2, 6, 5)], reduction=True)
    check("group_norm", lambda a: gn(a, 1, eps=0.1), lambda a: F.group_norm(a, 1, eps=0.1), [(3, 2)], reduction=True)


def test_batch_norm_inference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    mean, weight, bias = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    check(
        "batch_norm",
        lambda a, m, v, w, b: tF.batch_norm(a, m, v, w, b, eps=1e-3),
        lambda a, m, v, w, b: F.batch_norm(a, m, v, w, b, eps=1e-3),
        inputs=[x, mean, var, weight, bias],
    )
    check(
        "batch_norm",
        lambda a, m, v: tF.batch_norm(a, m, v),
        lambda a, m, v: F.batch_norm(a, m, v),
        inputs=[x[:, :, 0], mean, var],
    )


def test_instance_norm():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w, b, m = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    v = rng.uniform(0.5, 2.0, 3).astype(np.float32)
    check(
        "instance_norm",
        lambda a, w, b: tF.instance_norm(a, weight=w, bias=b),
        lambda a, w, b: F.instance_norm(a, weight=w, bias=b),
        inputs=[x, w, b],
        reduction=True,
    )
    check(
        "instance_norm",
        lambda a: tF.instance_norm(a),
        lambda a: F.instance_norm(a),
        inputs=[x[:, :, 0]],
        reduction=True,
    )
    check(
        "instance_norm",
        lambda a, m, v: tF.instance_norm(a, m, v, use_input_stats=False),
        lambda a, m, v: F.instance_norm(a, m, v, use_input_stats=False),
        inputs=[x, m, v],
    )


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, math.inf])
def test_normalize(p):
    check("normalize", lambda a: tF.normalize(a, p=p), lambda a: F.normalize(a, p=p), [(3, 4, 5)], reduction=True)
    check("normalize", lambda a: tF.normalize(a, p, -1), lambda a: F.normalize(a, p, -1), [(3, 4)], reduction=True)


def test_normalize_clamps_small_norms_to_eps():
    a = np.array([[0.0, 0.0], [1e-7, -1e-7], [3.0, 4.0]], np.float32)
    check(
        "normalize", lambda t: tF.normalize(t, dim=1, eps=1e-6), lambda t: F.normalize(t, dim=1, eps=1e-6), inputs=[a]
    )


def test_errors():
    g = lm.Graph()
    x = g.input("x", (2, 4, 6))
    with pytest.raises(lm.ShapeError, match=r"layer_norm.*\(5,\).*\(2, 4, 6\)"):
        F.layer_norm(x, (5,))
    with pytest.raises(lm.ShapeError, match="rms_norm"):
        F.rms_norm(x, (4,))
    with pytest.raises(lm.ShapeError, match="group_norm: 3 groups"):
        F.group_norm(x, 3)
    with pytest.raises(lm.ShapeError, match=r"batch_norm.*\[4\]"):
        F.batch_norm(x, g.input("m", (5,)), g.input("v", (5,)))
    with pytest.raises(NotImplementedError, match="batch_norm: training=True"):
        F.batch_norm(x, None, None, training=True)
    with pytest.raises(lm.ShapeError, match="softmax: dim 3"):
        x.softmax(3)
