"""Activations. Each ONNX formula is written out with the attribute defaults the operator schema gives."""

from __future__ import annotations

import luminal.functional as F
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import require_float
from luminal.onnx.registry import translates
from luminal.tensor import Tensor

SELU_ALPHA = 1.67326319217681884765625  # the schema's defaults (float32 values of torch's constants)
SELU_GAMMA = 1.05070102214813232421875


def _x(ctx: NodeContext) -> Tensor:
    return require_float(ctx, ctx.x(0))


@translates("Relu")
def relu(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    if not x.dtype.is_float and not x.dtype.is_int:
        raise ctx.unsupported(f"{x.dtype.name} inputs are not supported")
    return F.relu(x)


@translates("LeakyRelu", attrs={"alpha"})
def leaky_relu(ctx: NodeContext) -> Tensor:
    return F.leaky_relu(_x(ctx), ctx.attr("alpha", 0.01))


@translates("PRelu")
def prelu(ctx: NodeContext) -> Tensor:
    x, slope = _x(ctx), ctx.x(1)
    return F.where(F.lt(x, 0.0), F.mul(x, slope), x)  # slope x below zero (slope broadcasts to x)


@translates("Elu", attrs={"alpha"})
def elu(ctx: NodeContext) -> Tensor:
    return F.elu(_x(ctx), ctx.attr("alpha", 1.0))


@translates("Selu", attrs={"alpha", "gamma"})
def selu(ctx: NodeContext) -> Tensor:
    alpha, gamma = ctx.attr("alpha", SELU_ALPHA), ctx.attr("gamma", SELU_GAMMA)
    return F.elu(_x(ctx), alpha, scale=gamma)  # gamma x above zero, gamma alpha (e^x - 1) below


@translates("Celu", attrs={"alpha"})
def celu(ctx: NodeContext) -> Tensor:
    return F.celu(_x(ctx), ctx.attr("alpha", 1.0))


@translates("ThresholdedRelu", attrs={"alpha"})
def thresholded_relu(ctx: NodeContext) -> Tensor:
    x = _x(ctx)
    return F.where(F.gt(x, ctx.attr("alpha", 1.0)), x, F.zeros_like(x))  # x where x > alpha, else 0


@translates("HardSigmoid", attrs={"alpha", "beta"})
def hard_sigmoid(ctx: NodeContext) -> Tensor:
    x = _x(ctx)
    return F.clamp(F.add(F.mul(x, ctx.attr("alpha", 0.2)), ctx.attr("beta", 0.5)), 0.0, 1.0)  # clip(a x + b, 0, 1)


@translates("HardSwish")
def hard_swish(ctx: NodeContext) -> Tensor:
    x = _x(ctx)
    return F.mul(x, F.clamp(F.add(F.mul(x, 1 / 6), 0.5), 0.0, 1.0))  # x hardsigmoid(x) with alpha 1/6, beta 1/2


@translates("Sigmoid")
def sigmoid(ctx: NodeContext) -> Tensor:
    return F.sigmoid(_x(ctx))


@translates("Swish", attrs={"alpha"})
def swish(ctx: NodeContext) -> Tensor:
    x = _x(ctx)
    return F.mul(x, F.sigmoid(F.mul(x, ctx.attr("alpha", 1.0))))  # x sigmoid(alpha x)


@translates("Softplus")
def softplus(ctx: NodeContext) -> Tensor:
    return F.softplus(_x(ctx))


@translates("Softsign")
def softsign(ctx: NodeContext) -> Tensor:
    return F.softsign(_x(ctx))


@translates("Mish")
def mish(ctx: NodeContext) -> Tensor:
    """x tanh(softplus(x)), with tanh(s) = -expm1(-2s) / (2 + expm1(-2s)): accurate for the tiny s of very
    negative x, where 1 - 2 / (e^2s + 1) would cancel."""
    x = _x(ctx)
    e = F.expm1(F.mul(F.softplus(x), -2.0))
    return F.mul(x, F.div(F.neg(e), F.add(e, 2.0)))


@translates("Gelu", attrs={"approximate"})
def gelu(ctx: NodeContext) -> Tensor:
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return F.gelu(_x(ctx), approximate=approximate)


@translates("Shrink", attrs={"bias", "lambd"})
def shrink(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    bias, lambd = ctx.attr("bias", 0.0), ctx.attr("lambd", 0.5)
    if not x.dtype.is_float:
        raise ctx.unsupported(f"{x.dtype.name} inputs are not supported")
    zero = F.zeros_like(x)
    return F.where(F.lt(x, -lambd), F.add(x, bias), F.where(F.gt(x, lambd), F.sub(x, bias), zero))


@translates("SwiGLU", attrs={"alpha"})
def swiglu(ctx: NodeContext) -> Tensor:
    a, b = _x(ctx), ctx.x(1)
    return F.mul(F.mul(a, F.sigmoid(F.mul(a, ctx.attr("alpha", 1.0)))), b)  # swish(A) B
