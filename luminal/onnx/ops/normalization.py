"""Softmax family and normalizations: Softmax, LogSoftmax, Hardmax, LayerNormalization, RMSNormalization,
BatchNormalization (inference), InstanceNormalization, GroupNormalization, LpNormalization,
MeanVarianceNormalization, LRN. Statistics are computed in float32 (ONNX's default stash_type)."""

from __future__ import annotations

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis, require_float
from luminal.onnx.registry import translates
from luminal.symbolic import as_dim
from luminal.tensor import Tensor
from luminal.view import dims_product


def _along(ctx: NodeContext, fn) -> Tensor:
    """fn over one axis; before opset 13 the input is viewed as 2-D [outer, inner] split at `axis` (default 1)
    and fn runs over the whole inner part."""
    x = require_float(ctx, ctx.x(0))
    if ctx.opset >= 13:
        return fn(x, axis(ctx, ctx.attr("axis", -1), x.ndim))
    a = axis(ctx, ctx.attr("axis", 1), x.ndim + 1)
    flat = F.reshape(x, [as_dim(dims_product(x.shape[:a])), as_dim(dims_product(x.shape[a:]))])
    return F.reshape(fn(flat, 1), x.shape)


def _softmax(x: Tensor, a: int) -> Tensor:
    """e / sum(e) with e = exp(x - max), each step in x's type: half-precision results then round where
    ONNX's reference rounds (luminal's softmax keeps float32 throughout and rounds once)."""
    e = F.exp(F.sub(x, F.amax(x, a, keepdim=True)))
    return F.div(e, F.sum(e, a, keepdim=True))


def _log_softmax(x: Tensor, a: int) -> Tensor:
    shifted = F.sub(x, F.amax(x, a, keepdim=True))  # (x - max) - ln(sum(exp(x - max)))
    return F.sub(shifted, F.log(F.sum(F.exp(shifted), a, keepdim=True)))


@translates("Softmax", attrs={"axis"})
def softmax(ctx: NodeContext) -> Tensor:
    return _along(ctx, _softmax)


@translates("LogSoftmax", attrs={"axis"})
def log_softmax(ctx: NodeContext) -> Tensor:
    return _along(ctx, _log_softmax)


@translates("Hardmax", attrs={"axis"})
def hardmax(ctx: NodeContext) -> Tensor:
    def hard(x: Tensor, a: int) -> Tensor:
        hot = F.one_hot(F.argmax(x, a), x.shape[a])  # 1 at the first maximum
        return F.cast(F.movedim(hot, -1, a), x.dtype)

    return _along(ctx, hard)


def _stash(ctx: NodeContext, x: Tensor) -> Tensor:
    """x in the statistics' type: float32, the only stash_type supported."""
    _check_stash(ctx)
    return F.cast(x, dt.float32)


def _check_stash(ctx: NodeContext) -> None:
    if ctx.attr("stash_type", 1) != 1:
        raise ctx.unsupported(f"stash_type={ctx.attr('stash_type')} is not supported (1, float32, is)")


@translates("LayerNormalization", attrs={"axis", "epsilon", "stash_type"})
def layer_norm(ctx: NodeContext) -> tuple[Tensor, Tensor, Tensor]:
    """Y = (X - mean) / sqrt(var + eps) * scale + B over the axes from `axis` on; also Mean and InvStdDev."""
    x = require_float(ctx, ctx.x(0))
    a = axis(ctx, ctx.attr("axis", -1), x.ndim)
    dims = list(range(a, x.ndim))
    xf = _stash(ctx, x)
    mean = F.mean(xf, dims, keepdim=True)
    centered = F.sub(xf, mean)
    inv_std = F.rsqrt(F.add(F.mean(F.mul(centered, centered), dims, keepdim=True), ctx.attr("epsilon", 1e-5)))
    y = F.cast(F.mul(centered, inv_std), x.dtype)
    y = F.mul(y, ctx.x(1))
    if ctx.has(2):
        y = F.add(y, ctx.x(2))
    return y, mean, inv_std


@translates("RMSNormalization", attrs={"axis", "epsilon", "stash_type"})
def rms_norm(ctx: NodeContext) -> Tensor:
    """Y = X / sqrt(mean(X^2) + eps) * scale over the axes from `axis` on."""
    x = require_float(ctx, ctx.x(0))
    a = axis(ctx, ctx.attr("axis", -1), x.ndim)
    xf = _stash(ctx, x)
    rms = F.rsqrt(F.add(F.mean(F.mul(xf, xf), list(range(a, x.ndim)), keepdim=True), ctx.attr("epsilon", 1e-5)))
    return F.mul(F.cast(F.mul(xf, rms), x.dtype), ctx.x(1))


def _per_channel(t: Tensor, rank: int) -> Tensor:
    """A [C] parameter viewed as [C, 1, ...] to broadcast against [N, C, *spatial]."""
    return F.reshape(t, [t.shape[0]] + [1] * (rank - 2))


@translates("BatchNormalization", attrs={"epsilon", "momentum", "training_mode", "spatial", "is_test"})
def batch_norm(ctx: NodeContext) -> Tensor | tuple[Tensor, Tensor, Tensor]:
    """(x - mean) / sqrt(var + eps) * scale + B per channel. In training mode the statistics are the batch's
    (variance biased), and the running ones come out updated: running * momentum + batch * (1 - momentum)."""
    if ctx.attr("spatial", 1) != 1:
        raise ctx.unsupported("spatial=0 is not supported")
    x = require_float(ctx, ctx.x(0))
    scale, bias, mean, var = (_per_channel(ctx.x(i), x.ndim) for i in range(1, 5))
    eps = ctx.attr("epsilon", 1e-5)
    if not ctx.attr("training_mode", 0):
        return F.add(F.mul(F.mul(F.sub(x, mean), F.rsqrt(F.add(var, eps))), scale), bias)
    dims = [0, *range(2, x.ndim)]
    batch_mean = F.mean(x, dims, keepdim=True)
    centered = F.sub(x, batch_mean)
    batch_var = F.mean(F.mul(centered, centered), dims, keepdim=True)
    y = F.add(F.mul(F.mul(centered, F.rsqrt(F.add(batch_var, eps))), scale), bias)
    momentum = ctx.attr("momentum", 0.9)

    def running(old: Tensor, batch: Tensor) -> Tensor:
        return F.reshape(F.add(F.mul(old, momentum), F.mul(batch, 1 - momentum)), [-1])

    return y, running(mean, batch_mean), running(var, batch_var)


def _standardize(x: Tensor, dims: list[int], eps: float) -> Tensor:
    xf = F.cast(x, dt.float32)
    mean = F.mean(xf, dims, keepdim=True)
    centered = F.sub(xf, mean)
    var = F.mean(F.mul(centered, centered), dims, keepdim=True)
    return F.cast(F.mul(centered, F.rsqrt(F.add(var, eps))), x.dtype)


@translates("InstanceNormalization", attrs={"epsilon"})
def instance_norm(ctx: NodeContext) -> Tensor:
    x = require_float(ctx, ctx.x(0))
    y = _standardize(x, list(range(2, x.ndim)), ctx.attr("epsilon", 1e-5))
    return F.add(F.mul(y, _per_channel(ctx.x(1), x.ndim)), _per_channel(ctx.x(2), x.ndim))


@translates("GroupNormalization", attrs={"epsilon", "num_groups", "stash_type"})
def group_norm(ctx: NodeContext) -> Tensor:
    """Standardize each of num_groups channel groups; scale and bias are per channel from opset 21, per group
    before."""
    x = require_float(ctx, ctx.x(0))
    g = int(ctx.attr("num_groups"))
    n, c, *spatial = x.shape
    _check_stash(ctx)
    grouped = F.reshape(x, [n, g, -1])
    y = F.reshape(_standardize(grouped, [2], ctx.attr("epsilon", 1e-5)), x.shape)
    scale, bias = ctx.x(1), ctx.x(2)
    if ctx.opset < 21:  # one value per group, spread over its channels
        scale, bias = (F.repeat_interleave(t, c // g) for t in (scale, bias))
    return F.add(F.mul(y, _per_channel(scale, x.ndim)), _per_channel(bias, x.ndim))


@translates("LpNormalization", attrs={"axis", "p"})
def lp_norm(ctx: NodeContext) -> Tensor:
    x = require_float(ctx, ctx.x(0))
    a, p = axis(ctx, ctx.attr("axis", -1), x.ndim), ctx.attr("p", 2)
    if p == 1:
        norm = F.sum(F.abs(x), a, keepdim=True)
    elif p == 2:
        norm = F.sqrt(F.sum(F.mul(x, x), a, keepdim=True))
    else:
        raise ctx.error(f"p must be 1 or 2, got {p}")
    return F.where(F.eq(norm, 0.0), F.zeros_like(x), F.div(x, norm))  # a zero vector stays zero


@translates("MeanVarianceNormalization", attrs={"axes"})
def mean_variance_norm(ctx: NodeContext) -> Tensor:
    """(X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9), the schema's function body."""
    x = require_float(ctx, ctx.x(0))
    dims = [axis(ctx, a, x.ndim) for a in ctx.attr("axes", [0, 2, 3])]
    mean = F.mean(x, dims, keepdim=True)
    var = F.sub(F.mean(F.mul(x, x), dims, keepdim=True), F.mul(mean, mean))
    return F.div(F.sub(x, mean), F.add(F.sqrt(var), 1e-9))


@translates("LRN", attrs={"alpha", "beta", "bias", "size"})
def lrn(ctx: NodeContext) -> Tensor:
    """Y = X / (bias + alpha / size * sum of X^2 over the channel window)^beta; the window around c spans
    floor((size - 1) / 2) channels before and ceil((size - 1) / 2) after."""
    x = require_float(ctx, ctx.x(0))
    size = int(ctx.attr("size"))
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = F.mul(x, x)
    c = x.shape[1]
    padded = F.pad(sq, [0, 0] * (x.ndim - 2) + [before, after])
    total = F.add(*[padded[:, k : k + c] for k in range(2)]) if size >= 2 else padded
    for k in range(2, size):
        total = F.add(total, padded[:, k : k + c])
    return F.div(x, F.pow(F.add(F.mul(total, alpha / size), bias), beta))
