"""Indexing and joining: Gather, GatherElements, GatherND, Slice, Concat, Split, Trilu, ScatterElements,
ScatterND, OneHot, CumSum. Negative indices count from the end, as ONNX says, and are wrapped at run time."""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
from luminal.hl import prim
from luminal.onnx import symbolic
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis
from luminal.onnx.registry import translates
from luminal.symbolic import Expr, as_expr
from luminal.tensor import Tensor
from luminal.view import idx

_HUGE = 1 << 62  # ONNX writes "to the end" as INT64_MAX (or INT32_MAX); any bound past this means the same


def _wrapped(index: Tensor, n) -> Tensor:
    """index + n where index < 0: negative indices count from the end."""
    index = F.cast(index, dt.int64)
    return F.where(F.lt(index, 0), F.add(index, _size(index, n)), index)


def _size(like: Tensor, n) -> Tensor:
    """A dim size as an int64 scalar tensor (an Iota when the size is symbolic)."""
    return prim.scalar(like.graph, n, dt.int64) if isinstance(n, int) else prim.iota(like.graph, as_expr(n), [])


def _index_input(ctx: NodeContext, i: int) -> Tensor | np.ndarray:
    """An index input as a known array (checked and fixed at import) when it is known, else a tensor."""
    if ctx.is_const(i):
        return ctx.const(i, "indices").astype(np.int64)
    t = ctx.x(i)
    if not t.dtype.is_int:
        raise ctx.error(f"indices must be integers, got {t.dtype.name}")
    return t


@translates("Gather", attrs={"axis"})
def gather(ctx: NodeContext) -> Tensor:
    """out[i..., j..., k...] = data[i..., indices[j...], k...] along `axis` (numpy's take)."""
    data = ctx.x(0)
    a = axis(ctx, ctx.attr("axis", 0), data.ndim)
    index = _index_input(ctx, 1)
    return data[(slice(None),) * a + (index,)]


@translates("GatherElements", attrs={"axis"})
def gather_elements(ctx: NodeContext) -> Tensor:
    data, index = ctx.x(0), ctx.x(1)
    a = axis(ctx, ctx.attr("axis", 0), data.ndim)
    return F.gather(data, a, _wrapped(index, data.shape[a]))


@translates("GatherND", attrs={"batch_dims"})
def gather_nd(ctx: NodeContext) -> Tensor:
    """indices [..., k] address data's first k dims after `batch_dims` leading dims that data and indices share."""
    data, index = ctx.x(0), ctx.x(1)
    b = int(ctx.attr("batch_dims", 0))
    k = index.shape[-1]
    if not isinstance(k, int) or b + k > data.ndim:
        raise ctx.error(f"indices {index.shape} do not fit data {data.shape} with batch_dims={b}")
    lead = index.shape[:-1]
    keys: list = []
    for j in range(b):  # batch dim j reads its own position: an arange broadcast over the index shape
        ramp = prim.iota(data.graph, idx(0, data.shape[j]), [data.shape[j]])
        keys.append(F.reshape(ramp, [data.shape[j] if m == j else 1 for m in range(len(lead))]))
    keys += [index[..., j] for j in range(k)]
    return data[tuple(keys)]


@translates("Slice", attrs={"starts", "ends", "axes"})
def slice_(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    if ctx.opset < 10:  # starts/ends/axes were attributes, steps did not exist
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        dims, steps = ctx.attr("axes", list(range(len(starts)))), [1] * len(starts)
    else:
        starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
        dims = ctx.ints(3, "axes") if ctx.has(3) else list(range(len(starts)))
        steps = ctx.ints(4, "steps") if ctx.has(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(dims) == len(steps):
        raise ctx.error(f"starts {starts}, ends {ends}, axes {dims} and steps {steps} differ in length")
    for start, end, d, step in zip(starts, ends, dims, steps):
        x = _slice_axis(ctx, x, axis(ctx, d, x.ndim), start, end, step)
    return x


def _slice_axis(ctx: NodeContext, x: Tensor, d: int, start: int, end: int, step: int) -> Tensor:
    if step == 0:
        raise ctx.error("steps must not be 0")
    n = x.shape[d]
    if isinstance(n, int) and isinstance(end, Expr) and end.op == "var" and end.hi > n:
        raise symbolic.SymbolBound(end.args[0], n)  # a buffer sliced to a symbol: the model's maximum size
    if not all(isinstance(v, int) for v in (n, start, end)):  # a view bounded by symbols (x[:, :seq])
        if step < 0:
            raise ctx.unsupported("negative steps with symbolic sizes or bounds are not supported")
        start = None if isinstance(start, int) and start <= -_HUGE else start
        end = None if isinstance(end, int) and end >= _HUGE else end
        return x[(slice(None),) * d + (slice(start, end, step),)]
    lo, hi, step = slice(max(min(start, _HUGE), -_HUGE), max(min(end, _HUGE), -_HUGE), step).indices(n)
    count = len(range(lo, hi, step))
    if step > 0:
        return x[(slice(None),) * d + (slice(lo, lo + max(count - 1, 0) * step + 1 if count else lo, step),)]
    # a negative step walks the flipped axis forward: position i is n - 1 - i there
    first, stride = n - 1 - lo, -step
    flipped = F.flip(x, d)
    end_ = first + (count - 1) * stride + 1 if count else first
    return flipped[(slice(None),) * d + (slice(first, end_, stride),)]


@translates("Concat", attrs={"axis"})
def concat(ctx: NodeContext) -> Tensor:
    xs = ctx.inputs()
    a = axis(ctx, ctx.attr("axis"), xs[0].ndim)
    kept = [t for t in xs if t.shape[a] != 0] or xs[:1]  # empty inputs add nothing
    return F.cat(kept, a) if len(kept) > 1 else kept[0]


@translates("Split", attrs={"axis", "split", "num_outputs"})
def split(ctx: NodeContext) -> tuple[Tensor, ...]:
    x = ctx.x(0)
    a = axis(ctx, ctx.attr("axis", 0), x.ndim)
    n = x.shape[a]
    outputs = ctx.num_outputs
    if ctx.opset < 13:
        sizes = ctx.attr("split")
    else:
        sizes = ctx.ints(1, "split") if ctx.has(1) else None
    if sizes is None:
        if not isinstance(n, int):
            raise ctx.unsupported(f"an even split of symbolic dim {n} is not supported")
        if "num_outputs" in ctx.attrs:  # opset 18: ceil(n / k) each, the last one smaller
            k = int(ctx.attr("num_outputs"))
            chunk = -(-n // k)
            sizes = [min(chunk, n - j * chunk) for j in range(k)]
        else:
            if n % outputs:
                raise ctx.error(f"dim {n} does not split evenly into {outputs} outputs")
            sizes = [n // outputs] * outputs
    if len(sizes) != outputs:
        raise ctx.error(f"split {sizes} does not give one size per output ({outputs})")
    return tuple(F.split(x, list(sizes), a))


@translates("Trilu", attrs={"upper"})
def trilu(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    k = int(ctx.ints(1, "k")[0]) if ctx.has(1) else 0
    return F.triu(x, k) if ctx.attr("upper", 1) else F.tril(x, k)


@translates("ScatterElements", "Scatter", attrs={"axis", "reduction"})
def scatter_elements(ctx: NodeContext) -> Tensor:
    data, index, updates = ctx.x(0), ctx.x(1), ctx.x(2)
    a = axis(ctx, ctx.attr("axis", 0), data.ndim)
    index = _wrapped(index, data.shape[a])
    reduction = ctx.attr("reduction", "none")
    if reduction == "none":
        return F.scatter(data, a, index, updates)
    if reduction == "add":
        return F.scatter_add(data, a, index, updates)
    if reduction in ("mul", "max", "min"):
        return _scatter_reduce(data, a, index, updates, reduction)
    raise ctx.error(f"reduction must be none, add, mul, max or min, got {reduction!r}")


def _scatter_reduce(data: Tensor, a: int, index: Tensor, updates: Tensor, reduction: str) -> Tensor:
    """data combined with every update aimed at each position (repeats included) by *, max or min: a one-hot
    comparison index.shape + (n,) picks the updates, the identity of the reduction fills the rest."""
    n = data.shape[a]
    shape = [*index.shape, n]
    hits = F.eq(F.expand(F.unsqueeze(index, -1), shape), prim.iota(data.graph, idx(index.ndim, n), shape))
    values = F.unsqueeze(updates[tuple(slice(0, m) for m in index.shape)], -1)
    if reduction == "mul":
        identity = 1
    elif data.dtype.is_float:
        identity = float("-inf") if reduction == "max" else float("inf")
    else:
        info = np.iinfo(data.dtype.np)
        identity = int(info.min) if reduction == "max" else int(info.max)
    picked = F.where(hits, values, F.full_like(values, identity))
    reduce = {"mul": lambda t: F.prod(t, a), "max": lambda t: F.amax(t, a), "min": lambda t: F.amin(t, a)}[reduction]
    combined = F.movedim(reduce(picked), -1, a)  # index.shape with axis a now n
    aimed = F.movedim(F.gt(F.sum(F.cast(hits, dt.int32), a), 0), -1, a)
    widths = [w for d in reversed(range(data.ndim)) for w in (0, data.shape[d] - combined.shape[d])]
    combined, aimed = F.pad(combined, widths, value=identity), F.pad(aimed, widths)
    if reduction == "mul":
        return F.mul(data, combined)
    merged = F.maximum(data, combined) if reduction == "max" else F.minimum(data, combined)
    return F.where(aimed, merged, data)


@translates("ScatterND", attrs={"reduction"})
def scatter_nd(ctx: NodeContext) -> Tensor:
    data, index, updates = ctx.x(0), ctx.x(1), ctx.x(2)
    k = index.shape[-1]
    if not isinstance(k, int) or k > data.ndim:
        raise ctx.error(f"indices {index.shape} do not fit data {data.shape}")
    keys = [_wrapped(index[..., j], data.shape[j]) for j in range(k)]
    reduction = ctx.attr("reduction", "none")
    if reduction in ("none", "add"):
        return F.index_put(data, keys, updates, accumulate=reduction == "add")
    if reduction not in ("mul", "max", "min"):
        raise ctx.error(f"reduction must be none, add, mul, max or min, got {reduction!r}")
    # as a scatter along axis 0 of data viewed [prod(first k dims), rest]: flat row = sum_j key_j stride_j
    rows, rest = data.shape[:k], list(data.shape[k:])
    flat = None
    for j, key in enumerate(keys):
        stride = int(np.prod(rows[j + 1 :]))
        term = F.mul(key, stride) if stride != 1 else key
        flat = term if flat is None else F.add(flat, term)
    lead = list(index.shape[:-1])
    table = F.reshape(data, [int(np.prod(rows)), *rest])
    flat = F.reshape(flat, [-1, *([1] * len(rest))])
    flat = F.expand(flat, [flat.shape[0], *rest])
    moved = F.reshape(updates, [flat.shape[0], *rest]) if lead else F.reshape(updates, [1, *rest])
    return F.reshape(_scatter_reduce(table, 0, flat, moved, reduction), data.shape)


@translates("TensorScatter", attrs={"axis", "mode"})
def tensor_scatter(ctx: NodeContext) -> Tensor:
    """A KV-cache write: update's positions along `axis` land at write_indices[b] + s in batch entry b (modulo
    the cache length when circular)."""
    past, update = ctx.x(0), ctx.x(1)
    a = axis(ctx, ctx.attr("axis", -2), past.ndim)
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular") or a == 0:
        raise ctx.error(f"mode must be linear or circular and axis not the batch axis (got {mode!r}, {a})")
    steps = update.shape[a]
    start = F.cast(ctx.x(2), dt.int64) if ctx.has(2) else F.zeros_like(past[:, 0], dtype=dt.int64).reshape(-1)[:1]
    start = F.reshape(start, [-1] + [1] * (past.ndim - 1))
    offsets = F.reshape(F.arange(past.graph, steps), [steps if k == a else 1 for k in range(past.ndim)])
    index = F.add(start, offsets)
    if mode == "circular":
        index = F.remainder(index, past.shape[a])
    return F.scatter(past, a, F.expand(index, update.shape), update)


@translates("OneHot", attrs={"axis"})
def one_hot(ctx: NodeContext) -> Tensor:
    indices = ctx.x(0)
    depth = int(np.asarray(ctx.const(1, "depth")).reshape(-1)[0])
    values = ctx.x(2)  # [off, on]
    a = axis(ctx, ctx.attr("axis", -1), indices.ndim + 1)
    index = F.cast(indices, dt.int64)  # (float indices are allowed and truncate)
    index = F.where(F.lt(index, 0), F.add(index, depth), index)
    outside = F.logical_or(F.lt(index, 0), F.ge(index, depth))
    index = F.where(outside, F.full_like(index, depth), index)  # class `depth`, cut off below: no class is hot
    hot = F.one_hot(index, depth + 1)[..., :depth]
    hot = F.movedim(hot, -1, a)
    off, on = values[0], values[1]
    return F.where(F.cast(hot, dt.bool_), on, off)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


@translates("Pad", attrs={"mode", "pads", "value"})
def pad(ctx: NodeContext) -> Tensor:
    """pads = [begin of each padded axis..., end of each...]; negative pads crop. Before opset 11 pads and value
    were attributes; from opset 18 `axes` picks the padded axes."""
    x = ctx.x(0)
    mode = ctx.attr("mode", "constant")
    if mode not in _PAD_MODES:
        raise ctx.error(f"mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
    if ctx.opset < 11:
        pads, value = list(ctx.attr("pads")), float(ctx.attr("value", 0.0))
        dims = list(range(x.ndim))
    else:
        pads = ctx.ints(1, "pads")
        value = np.asarray(ctx.const(2, "constant_value")).reshape(-1)[0].item() if ctx.has(2) else 0
        dims = [axis(ctx, a, x.ndim) for a in ctx.ints(3, "axes")] if ctx.has(3) else list(range(x.ndim))
    if len(pads) != 2 * len(dims):
        raise ctx.error(f"pads {pads} must hold a begin and an end for each of {len(dims)} axes")
    widths = [0] * (2 * x.ndim)  # F.pad's order: (before, after) of the last axis first
    for j, d in enumerate(dims):
        widths[2 * (x.ndim - 1 - d)] = pads[j]
        widths[2 * (x.ndim - 1 - d) + 1] = pads[len(dims) + j]
    if mode != "constant" and any(w < 0 for w in widths):
        raise ctx.unsupported(f"negative pads with mode={mode!r} are not supported")
    if mode == "constant":
        return F.pad(x, widths, value=value if x.dtype != dt.bool_ else bool(value))
    return F.pad(x, widths, mode=_PAD_MODES[mode])


@translates("MaxUnpool", attrs={"kernel_shape", "pads", "strides"})
def max_unpool(ctx: NodeContext) -> Tensor:
    """Values X written at their flat positions `indices` (as MaxPool's Indices gives them) in a zero tensor of
    the pooled input's size, (i - 1) s - pads + k per spatial axis, then zero-padded to output_shape."""
    x, index = ctx.x(0), ctx.x(1)
    kernel = list(ctx.attr("kernel_shape"))
    nd = len(kernel)
    strides = list(ctx.attr("strides", [1] * nd))
    p = list(ctx.attr("pads", [0] * 2 * nd))
    n, c, *sizes = x.shape
    inferred = [
        n,
        c,
        *((i - 1) * s - (p[j] + p[nd + j]) + k for j, (i, k, s) in enumerate(zip(sizes, kernel, strides))),
    ]
    total = 1
    for d in inferred:
        total *= d
    flat = F.scatter(F.zeros(x.graph, [total], x.dtype), 0, F.cast(F.flatten(index), dt.int64), F.flatten(x))
    y = F.reshape(flat, inferred)
    if ctx.has(2):
        target = ctx.ints(2, "output_shape")
        widths = [w for d in reversed(range(x.ndim)) for w in (0, target[d] - inferred[d])]
        y = F.pad(y, widths)
    return y
