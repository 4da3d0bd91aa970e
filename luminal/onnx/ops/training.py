"""The optimizers of ai.onnx.preview.training: Adagrad, Adam and Momentum, one update step each.

Inputs are R (learning rate) and T (step count), both scalars, then n tensors to optimize, their n gradients and
their n accumulators (Adam: n first, then n second moments); outputs are the n new tensors, then the new
accumulators in the same order. Each update is the element-wise formula of ONNX's operator definition, with
g' = norm_coefficient x + g (the gradient of the L2 term added). T only decides branches and scales, inside the
graph, so one imported step runs at every T.
"""

from __future__ import annotations

import luminal.functional as F
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import require_float
from luminal.onnx.registry import translates
from luminal.tensor import Tensor

DOMAIN = "ai.onnx.preview.training"


def _groups(ctx: NodeContext, per_tensor: int) -> tuple[Tensor, Tensor, list[list[Tensor]]]:
    """(R, T, one list per optimized tensor: [x, g, accumulators...])."""
    n, left = divmod(ctx.num_inputs - 2, per_tensor)
    if n < 1 or left:
        raise ctx.error(f"takes R, T and {per_tensor} inputs per optimized tensor, got {ctx.num_inputs} inputs")
    r, t = ctx.x(0), ctx.x(1)
    if r.ndim != 0 or t.ndim != 0:
        raise ctx.error(f"R and T must be scalars, got shapes {r.shape} and {t.shape}")
    if not t.dtype.is_int:
        raise ctx.error(f"T must be an integer step count, got {t.dtype.name}")
    require_float(ctx, r)
    tensors = [[ctx.x(2 + k * n + i) for k in range(per_tensor)] for i in range(n)]
    return r, t, tensors


def _regularized(ctx: NodeContext, x: Tensor, g: Tensor) -> Tensor:
    return F.add(F.mul(x, ctx.attr("norm_coefficient", 0.0)), g)  # g' = norm_coefficient x + g


def _step(r: Tensor, like: Tensor) -> Tensor:
    return F.cast(r, like.dtype)


@translates(f"{DOMAIN}.Adagrad", attrs={"decay_factor", "epsilon", "norm_coefficient"})
def adagrad(ctx: NodeContext) -> tuple[Tensor, ...]:
    r, t, tensors = _groups(ctx, 3)
    decay, eps = ctx.attr("decay_factor", 0.0), ctx.attr("epsilon", 0.0)
    xs, hs = [], []
    for x, g, h in tensors:
        rate = F.div(_step(r, x), F.add(F.mul(F.cast(t, x.dtype), decay), 1.0))  # r / (1 + t decay)
        gr = _regularized(ctx, x, g)
        h_new = F.add(h, F.mul(gr, gr))  # h + g'^2
        xs.append(F.sub(x, F.div(F.mul(rate, gr), F.add(F.sqrt(h_new), eps))))  # x - rate g' / (sqrt(h') + eps)
        hs.append(h_new)
    return (*xs, *hs)


@translates(f"{DOMAIN}.Adam", attrs={"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"})
def adam(ctx: NodeContext) -> tuple[Tensor, ...]:
    r, t, tensors = _groups(ctx, 4)
    alpha, beta, eps = ctx.attr("alpha", 0.9), ctx.attr("beta", 0.999), ctx.attr("epsilon", 0.0)
    post = ctx.attr("norm_coefficient_post", 0.0)
    xs, vs, hs = [], [], []
    for x, g, v, h in tensors:
        gr = _regularized(ctx, x, g)
        v_new = F.add(F.mul(v, alpha), F.mul(gr, 1 - alpha))  # alpha v + (1 - alpha) g'
        h_new = F.add(F.mul(h, beta), F.mul(F.mul(gr, gr), 1 - beta))  # beta h + (1 - beta) g'^2
        tf = F.cast(t, x.dtype)
        # bias correction from the first step on: r sqrt(1 - beta^t) / (1 - alpha^t); at t = 0 plain r
        powers = [F.pow(F.full_like(tf, base), tf) for base in (beta, alpha)]
        corrected = F.div(F.sqrt(F.sub(1.0, powers[0])), F.sub(1.0, powers[1]))
        rate = F.mul(_step(r, x), F.where(F.gt(t, 0), corrected, F.ones_like(corrected)))
        x_new = F.sub(x, F.mul(rate, F.div(v_new, F.add(F.sqrt(h_new), eps))))
        xs.append(F.mul(x_new, 1 - post))  # the regularization applied after the step
        vs.append(v_new)
        hs.append(h_new)
    return (*xs, *vs, *hs)


@translates(f"{DOMAIN}.Momentum", attrs={"alpha", "beta", "mode", "norm_coefficient"})
def momentum(ctx: NodeContext) -> tuple[Tensor, ...]:
    r, t, tensors = _groups(ctx, 3)
    alpha, beta, mode = ctx.attr("alpha"), ctx.attr("beta"), ctx.attr("mode")
    if alpha is None or beta is None or mode is None:
        raise ctx.error("alpha, beta and mode are required attributes")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("standard", "nesterov"):
        raise ctx.unsupported(f"mode={mode!r} is not supported (standard, nesterov are)")
    xs, vs = [], []
    for x, g, v in tensors:
        gr = _regularized(ctx, x, g)
        tf = F.cast(t, x.dtype)
        scale = F.where(F.gt(t, 0), F.full_like(tf, beta), F.ones_like(tf))  # the first step's weight is 1
        v_new = F.add(F.mul(v, alpha), F.mul(gr, scale))  # alpha v + beta' g'
        step = v_new if mode == "standard" else F.add(gr, F.mul(v_new, alpha))  # nesterov: g' + alpha v'
        xs.append(F.sub(x, F.mul(_step(r, x), step)))
        vs.append(v_new)
    return (*xs, *vs)
