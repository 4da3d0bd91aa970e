"""float64 against PyTorch: promotion with the other types, casts both ways, reductions, GEMMs, softmax and norms,
each to float64's precision (tests/opcheck.py: 1e-12), so a value rounded through float32 anywhere fails."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import luminal.functional as F
from tests.opcheck import _random, check

SHAPE = (5, 7)
KW = {"shapes": [SHAPE], "dtype": "float64"}


def test_values_float32_cannot_hold_survive():
    x = np.array([[1 + 2.0**-40, 1e300, -1e-300, np.pi, 16777217.0, 0.1]])
    check("add", lambda t: t + 0.1, lambda t: t + 0.1, inputs=[x])
    check("mul", lambda t: t * t, lambda t: t * t, inputs=[x[:, :4]])


@pytest.mark.parametrize("other", ["float32", "float16", "bfloat16", "int64", "int8", "uint8", "bool"])
def test_promotion_with_every_kind(other):
    """float64 with any other tensor is float64 (torch.promote_types)."""
    a = _random(SHAPE, "float64", -2, 2, np.random.default_rng(1))
    b = _random(SHAPE, other, -9, 9, np.random.default_rng(2))
    for name in ("add", "mul", "sub", "maximum"):
        if name == "sub" and other == "bool":
            continue  # torch refuses bool subtraction
        check(name, getattr(torch, name), getattr(F, name), inputs=[a, b])


@pytest.mark.parametrize("dst", ["float32", "float16", "bfloat16", "int64", "int32", "int8", "uint8", "uint64", "bool"])
def test_casts_from_float64(dst):
    x = _random(SHAPE, "float64", -300, 300, np.random.default_rng(3))
    x.reshape(-1)[:6] = [2.0**31 - 0.5, -(2.0**31) + 0.25, 16777217.0, -0.5, 255.75, 1e-30]
    if dst in ("int32", "int8", "uint8", "float16", "bfloat16", "bool"):
        x.reshape(-1)[:2] = 0.0  # outside int32 (torch's results there are undefined) and float16's range
    check("to", lambda t: t.to(getattr(torch, dst)), lambda t: t.to(dst), inputs=[x])


@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16", "int64", "int32", "uint8", "bool"])
def test_casts_to_float64(src):
    check("to", lambda t: t.to(torch.float64), lambda t: t.to("float64"), shapes=[SHAPE], dtype=src, low=-99, high=99)


def test_reductions():
    for name in ("sum", "mean", "amax", "amin", "prod"):
        check(name, lambda t, n=name: getattr(t, n)(1), lambda t, n=name: getattr(t, n)(1), **KW)
    check("sum", lambda t: t.sum(), lambda t: t.sum(), shapes=[(64, 300)], dtype="float64")
    check("cumsum", lambda t: t.cumsum(1), lambda t: t.cumsum(1), **KW)
    check("argmax", lambda t: t.argmax(1), lambda t: t.argmax(1), **KW)
    check("var", lambda t: t.var(1), lambda t: t.var(1), **KW)


def test_matmul_softmax_and_norms():
    check("matmul", torch.matmul, F.matmul, shapes=[(3, 4, 70), (70, 9)], dtype="float64")
    check("softmax", lambda t: t.softmax(-1), lambda t: t.softmax(-1), **KW)
    check("log_softmax", lambda t: t.log_softmax(-1), lambda t: t.log_softmax(-1), **KW)
    check("layer_norm", lambda t: TF.layer_norm(t, (7,)), lambda t: F.layer_norm(t, (7,)), **KW)
    check("where", lambda t: torch.where(t > 0, t, t * 3), lambda t: F.where(t > 0, t, t * 3), **KW)
    check("pow", lambda t: t.abs() ** 1.5, lambda t: t.abs() ** 1.5, **KW)
    check("remainder", lambda t: torch.fmod(t, 0.3), lambda t: F.fmod(t, 0.3), **KW)
