"""Selecting and reordering elements: TopK, Compress, ReverseSequence, CenterCropPad.

TopK has no sort to lean on: each element's rank is counted by comparing it with every other element along
the axis (the larger ones, and equal ones at a lower index, come first: ONNX's tie rule), and output r reads
the element whose rank is r. That is n^2 comparisons per row, fine for the short axes TopK sees in models.
"""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
from luminal.hl import prim
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis
from luminal.onnx.registry import translates
from luminal.tensor import Tensor
from luminal.view import idx


@translates("TopK", attrs={"axis", "largest", "sorted", "k"})
def top_k(ctx: NodeContext) -> tuple[Tensor, Tensor]:
    x = ctx.x(0)
    if x.dtype == dt.bool_:
        raise ctx.unsupported("bool inputs are not supported")
    k = int(ctx.attr("k")) if ctx.opset < 10 else int(ctx.ints(1, "k")[0])
    a = axis(ctx, ctx.attr("axis", -1), x.ndim)
    n = x.shape[a]
    if not isinstance(n, int) or not 0 <= k <= n:
        raise ctx.error(f"k={k} does not fit axis {a} of shape {x.shape}")
    row = F.movedim(x, a, -1)  # [..., n]
    mine, other = F.unsqueeze(row, -1), F.unsqueeze(row, -2)  # [..., n(i), 1] and [..., 1, n(j)]
    ahead = F.gt(other, mine) if ctx.attr("largest", 1) else F.lt(other, mine)
    earlier = F.cast(prim.iota(x.graph, idx(1, n) < idx(0, n), [n, n]), dt.bool_)  # j < i
    ties_ahead = F.logical_and(F.eq(other, mine), earlier)
    rank = F.sum(F.cast(F.logical_or(ahead, ties_ahead), dt.int32), -1)  # [..., n]: each element's place
    places = F.reshape(F.arange(x.graph, k), [k, 1])
    hit = F.eq(F.unsqueeze(rank, -2), F.cast(places, dt.int64))  # [..., k, n]: place r holds element i
    indices = F.argmax(F.cast(hit, dt.int32), -1)  # [..., k]
    values = F.gather(row, -1, indices)
    return F.movedim(values, -1, a), F.movedim(indices, -1, a)


@translates("Compress", attrs={"axis"})
def compress(ctx: NodeContext) -> Tensor:
    """The slices where condition is true: the condition decides the output's shape, so it must be known."""
    x = ctx.x(0)
    keep = np.flatnonzero(np.asarray(ctx.const(1, "condition")).astype(bool))
    if "axis" not in ctx.attrs:
        x, a = F.flatten(x), 0
    else:
        a = axis(ctx, ctx.attr("axis"), x.ndim)
    n = x.shape[a]
    keep = keep[keep < n] if isinstance(n, int) else keep
    if keep.size == 0:
        return x[(slice(None),) * a + (slice(0, 0),)]
    return x[(slice(None),) * a + (keep.astype(np.int64),)]


@translates("ReverseSequence", attrs={"batch_axis", "time_axis"})
def reverse_sequence(ctx: NodeContext) -> Tensor:
    """Each batch entry's first sequence_lens[b] time steps reversed, the rest kept: out[b, t] =
    x[b, lens[b] - 1 - t] for t < lens[b], a gather along the time axis."""
    x, lens = ctx.x(0), F.cast(ctx.x(1), dt.int64)
    b_axis, t_axis = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    steps = x.shape[t_axis]
    shape = [1] * x.ndim
    shape[t_axis] = steps
    t = F.reshape(F.arange(x.graph, steps), shape)
    shape = [1] * x.ndim
    shape[b_axis] = x.shape[b_axis]
    length = F.reshape(lens, shape)
    source = F.where(F.lt(t, length), F.sub(F.sub(length, 1), t), t)
    return F.gather(x, t_axis, F.expand(source, x.shape))


@translates("CenterCropPad", attrs={"axes"})
def center_crop_pad(ctx: NodeContext) -> Tensor:
    """Each named axis cropped or zero-padded to its target size around the center (the odd element at the
    end)."""
    x = ctx.x(0)
    target = ctx.ints(1, "shape")
    dims = [axis(ctx, a, x.ndim) for a in ctx.attr("axes", range(x.ndim))]
    for d, size in zip(dims, target):
        n = x.shape[d]
        if size < n:
            start = (n - size) // 2
            x = x[(slice(None),) * d + (slice(start, start + size),)]
        elif size > n:
            before = (size - n) // 2
            widths = [0, 0] * x.ndim
            widths[2 * (x.ndim - 1 - d)] = before
            widths[2 * (x.ndim - 1 - d) + 1] = size - n - before
            x = F.pad(x, widths)
    return x
