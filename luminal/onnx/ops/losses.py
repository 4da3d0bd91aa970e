"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (its log_softmax then the same NLL).

loss[n, d...] = -input[n, target[n, d...], d...] * weight[target], 0 where target == ignore_index;
reduced by none, sum, or a mean weighted by the gathered weights (the count of kept targets without weights).
"""

from __future__ import annotations

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import require_float
from luminal.onnx.registry import translates
from luminal.tensor import Tensor


def _nll(ctx: NodeContext, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    if logp.ndim < 2:
        raise ctx.error(f"input must be [N, C, ...], got shape {logp.shape}")
    if not target.dtype.is_int:
        raise ctx.error(f"target must be integers, got {target.dtype.name}")
    target = F.cast(target, dt.int64)
    ignore = ctx.attr("ignore_index")
    kept = F.ne(target, ignore) if ignore is not None else F.ones_like(target, dtype=dt.bool_)
    safe = F.where(kept, target, F.zeros_like(target))  # an ignored target may be any value: read class 0
    picked = F.squeeze(F.gather(logp, 1, F.unsqueeze(safe, 1)), 1)
    zero = F.zeros_like(picked)
    loss = F.where(kept, F.neg(picked), zero)
    if weight is not None:
        w = F.where(kept, F.reshape(F.embedding(safe, F.reshape(weight, [-1, 1])), target.shape), zero)
    elif ignore is not None and ignore != -1:
        w = F.cast(kept, logp.dtype)
    else:
        # ONNX's reference implementation averages over every element when ignore_index is -1 and there are no
        # weights (its ignored entries still count); followed so that results agree with it.
        w = None
    if w is not None and weight is not None:
        loss = F.mul(loss, w)
    reduction = ctx.attr("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return F.sum(loss)
    if reduction != "mean":
        raise ctx.error(f"reduction must be none, sum or mean, got {reduction!r}")
    return F.div(F.sum(loss), F.sum(w)) if w is not None else F.mean(loss)


@translates("NegativeLogLikelihoodLoss", attrs={"ignore_index", "reduction"})
def negative_log_likelihood_loss(ctx: NodeContext) -> Tensor:
    return _nll(ctx, require_float(ctx, ctx.x(0)), ctx.x(1), ctx.x(2) if ctx.has(2) else None)


@translates("SoftmaxCrossEntropyLoss", attrs={"ignore_index", "reduction"})
def softmax_cross_entropy_loss(ctx: NodeContext) -> tuple[Tensor, Tensor]:
    scores = require_float(ctx, ctx.x(0))
    shifted = F.sub(scores, F.amax(scores, 1, keepdim=True))  # log_softmax over the class axis
    logp = F.sub(shifted, F.log(F.sum(F.exp(shifted), 1, keepdim=True)))
    return _nll(ctx, logp, ctx.x(1), ctx.x(2) if ctx.has(2) else None), logp
