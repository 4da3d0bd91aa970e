"""Convolutions and pooling from views: the windows of every output position are a view of the padded input
(im2col without a copy), and a convolution is then one matmul-shaped multiply + sum over (channel, kernel).

The window view, per spatial axis of size i (kernel k, stride s, dilation d, o outputs): repeat the row
enough times, read the repeats flat as rows of length i + d, and take every s-th element:

    y[kk, oo] = row[(kk * (i + d) + oo * s) mod i] = x[kk * d + oo * s]   (kk * d + oo * s < i for valid outputs)

so reshape, expand and strided slices express it and nothing is gathered.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from luminal import dtypes as dt
from luminal.hl import prim
from luminal.symbolic import Dim, as_dim, as_expr
from luminal.tensor import Tensor
from luminal.view import ShapeError, ShapeTracker, dims_product, format_shape

IntOrTuple = int | Sequence[int]


def _tuple(v: IntOrTuple, nd: int, what: str, op: str) -> tuple[int, ...]:
    out = (v,) * nd if isinstance(v, int) else tuple(v)
    if len(out) == 1 and nd > 1:
        out = out * nd
    if len(out) != nd or not all(isinstance(a, int) for a in out):
        raise ValueError(f"{op}: {what} must be an int or {nd} ints, got {v!r}")
    return out


def _window_last(st: ShapeTracker, k: int, s: int, d: int, op: str) -> ShapeTracker:
    """View [..., i] as [..., k, o] with y[..., kk, oo] = x[..., kk * d + oo * s] (see the module docstring).

    o = (i - d (k - 1) - 1) // s + 1, every window that fits. The last slice stops at X - X % s + 1 for
    X = i - d (k - 1) - 1 rather than at (o - 1) s + 1: the same number, but written so that its bound
    (<= i + d) is provable when i is symbolic.
    """
    if as_expr(st.shape[-1]).lo < d * (k - 1) + 1:  # a symbolic size must be declared with min= large enough
        raise ShapeError(
            f"{op}: the window {d * (k - 1) + 1} can be larger than the (padded) input size {st.shape[-1]}"
            " (declare a symbolic size with a large enough min=)"
        )
    *lead, i = st.shape
    keep = [(0, n, 1) for n in lead]
    if d == 1 and k == s and isinstance(i, int):  # disjoint windows (2x2 pools, patch embeddings): a plain split
        o = (i - k) // s + 1
        v = st.slice([*keep, (0, o * s, 1)]).reshape((*lead, o, s))
        return v.permute([*range(len(lead)), len(lead) + 1, len(lead)])
    # enough copies of the row to hold k rows of length i + d; from i's lower bound so symbolic sizes check too
    reps = k + -(-k * d // max(as_expr(i).lo, 1))
    v = st.reshape((*lead, 1, i)).expand((*lead, reps, i)).reshape((*lead, as_dim(as_expr(reps) * i)))
    v = v.slice([*keep, (0, as_dim(k * (as_expr(i) + d)), 1)]).reshape((*lead, k, as_dim(as_expr(i) + d)))
    last = as_expr(i) - d * (k - 1) - 1  # start of the last window that fits
    return v.slice([*keep, (0, k, 1), (0, as_dim(last - last % s + 1), s)])


def _windows(x: Tensor, kernel, stride, dilation, pads, op: str) -> Tensor:
    """x [N, C, *spatial] padded by `pads` (zeros) -> [N, C, *outs, *kernel]: the receptive field of each output."""
    nd = len(kernel)
    st = x.st.pad([(0, 0), (0, 0), *pads])
    for j in range(nd):  # rotate: window the first spatial axis, append its [k, o] at the end
        st = st.permute([0, 1, *range(3, st.ndim), 2])
        st = _window_last(st, kernel[j], stride[j], dilation[j], op)
    # now [N, C, k1, o1, k2, o2, ...]
    return x.with_view(st.permute([0, 1, *(3 + 2 * j for j in range(nd)), *(2 + 2 * j for j in range(nd))]))


def _batched(x: Tensor, nd: int, op: str) -> tuple[Tensor, bool]:
    """Accept [C, *spatial] like torch by adding (and later removing) a batch dim."""
    if x.ndim == nd + 1:
        return x.with_view(x.st.reshape((1, *x.shape))), True
    if x.ndim != nd + 2:
        raise ShapeError(f"{op}: expected a {nd + 1}-D or {nd + 2}-D input, got {format_shape(x.shape)}")
    return x, False


def _unbatch(y: Tensor, was_unbatched: bool) -> Tensor:
    return y.with_view(y.st.reshape(y.shape[1:])) if was_unbatched else y


# ---- convolution --------------------------------------------------------------------------------------


def _conv(x: Tensor, weight: Tensor, bias, stride, padding, dilation, groups: int, nd: int, op: str) -> Tensor:
    from luminal.hl import elementwise as E
    from luminal.hl.linalg import matmul

    x, unbatched = _batched(x, nd, op)
    if weight.ndim != nd + 2:
        raise ShapeError(
            f"{op}: weight must be {nd + 2}-D [out, in / groups, *kernel], got {format_shape(weight.shape)}"
        )
    n, c, *spatial = x.shape
    o_ch, cg, *kernel = weight.shape
    if c != cg * groups or o_ch % groups:
        raise ShapeError(
            f"{op}: input {format_shape(x.shape)} and weight {format_shape(weight.shape)} do not match "
            f"with groups={groups} (input channels must be weight.shape[1] * groups, out channels divisible)"
        )
    if x.dtype != weight.dtype or (bias is not None and bias.dtype != x.dtype):
        raise dt.DTypeError(
            f"{op}: input, weight and bias must share one dtype, got {x.dtype.name} and {weight.dtype.name}"
        )
    stride, dilation = _tuple(stride, nd, "stride", op), _tuple(dilation, nd, "dilation", op)
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"{op}: padding must be 'same', 'valid', an int or a tuple, got {padding!r}")
        if padding == "same" and any(s != 1 for s in stride):
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions")
        totals = [d * (k - 1) if padding == "same" else 0 for k, d in zip(kernel, dilation)]
        pads = [(t // 2, t - t // 2) for t in totals]  # torch puts the odd element on the right
    else:
        pads = [(p, p) for p in _tuple(padding, nd, "padding", op)]
    patches = _windows(x, kernel, stride, dilation, pads, op)  # [N, C, *outs, *kernel]
    outs = patches.shape[2 : 2 + nd]
    # A GEMM per group: weight [Og, K] @ patches [K, last out dim], the other out dims batched, where
    # K = Cg * prod(kernel). Out dims are never merged: a product of symbolic sizes has no provable bound.
    # patches [N, G, Cg, *outs, *kernel] -> [N, G, *outs[:-1], Cg, *kernel, outs[-1]] -> [.., K, outs[-1]]
    k_len = as_dim(cg * math.prod(kernel))
    st = patches.st.reshape((n, groups, cg, *outs, *kernel))
    st = st.permute([0, 1, *range(3, 2 + nd), 2, *range(3 + nd, 3 + 2 * nd), 2 + nd])
    cols = patches.with_view(st.reshape((n, groups, *outs[:-1], k_len, outs[-1])))
    rows = weight.with_view(weight.st.reshape((groups, *([1] * (nd - 1)), o_ch // groups, k_len)))  # [G, 1.., Og, K]
    y = matmul(rows, cols)  # [N, G, *outs[:-1], Og, outs[-1]]: y[o, p] = sum_K w[o, K] * patch[K, p]
    y = y.with_view(y.st.permute([0, 1, nd + 1, *range(2, nd + 1), nd + 2]).reshape((n, o_ch, *outs)))
    if bias is not None:
        y = E.add(y, bias.with_view(bias.st.reshape((o_ch, *([1] * nd)))))
    return _unbatch(y, unbatched)


def conv1d(x, weight, bias=None, stride: IntOrTuple = 1, padding: Any = 0, dilation: IntOrTuple = 1, groups=1):
    return _conv(x, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(x, weight, bias=None, stride: IntOrTuple = 1, padding: Any = 0, dilation: IntOrTuple = 1, groups=1):
    return _conv(x, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv3d(x, weight, bias=None, stride: IntOrTuple = 1, padding: Any = 0, dilation: IntOrTuple = 1, groups=1):
    return _conv(x, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


def _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, nd, op) -> Tensor:
    """The transpose (gradient) of a convolution as a plain one: spread the input by `stride` (zeros between),
    pad each side by d (k - 1) - p (crop where negative), and convolve with the flipped, channel-swapped kernel."""
    x, unbatched = _batched(x, nd, op)
    if weight.ndim != nd + 2 or weight.shape[0] != x.shape[1] or weight.shape[0] % groups:
        raise ShapeError(
            f"{op}: weight {format_shape(weight.shape)} must be [in, out / groups, *kernel] for input "
            f"{format_shape(x.shape)} with groups={groups}"
        )
    stride, dilation = _tuple(stride, nd, "stride", op), _tuple(dilation, nd, "dilation", op)
    padding, extra = _tuple(padding, nd, "padding", op), _tuple(output_padding, nd, "output_padding", op)
    if any(e >= max(s, d) for e, s, d in zip(extra, stride, dilation)):
        raise ValueError(f"{op}: output_padding {extra} must be smaller than stride or dilation")
    n, c, *spatial = x.shape
    cin, og, *kernel = weight.shape
    # spread: [.., i] -> [.., i, 1] -> pad to [.., i, s] -> [.., i * s] -> first (i - 1) * s + 1
    st = x.st.reshape((n, c, *(d for i in spatial for d in (i, 1))))
    st = st.pad([(0, 0), (0, 0), *(p for s in stride for p in ((0, 0), (0, s - 1)))])
    st = st.reshape((n, c, *(as_dim(as_expr(i) * s) for i, s in zip(spatial, stride))))
    st = st.slice([(0, n, 1), (0, c, 1), *((0, as_dim((as_expr(i) - 1) * s + 1), 1) for i, s in zip(spatial, stride))])
    edges = [(d * (k - 1) - p, d * (k - 1) - p + e) for k, d, p, e in zip(kernel, dilation, padding, extra)]
    st = st.pad([(0, 0), (0, 0), *((max(lo, 0), max(hi, 0)) for lo, hi in edges)])
    sizes = st.shape[2:]
    st = st.slice(
        [
            (0, n, 1),
            (0, c, 1),
            *((max(-lo, 0), as_dim(as_expr(m) - max(-hi, 0)), 1) for (lo, hi), m in zip(edges, sizes)),
        ]
    )
    # weight [G * Cin_g, Og, *k] -> [G, Og, Cin_g, *k] -> [G * Og, Cin_g, *k], flipped in space
    w = weight.st.reshape((groups, cin // groups, og, *kernel)).permute([0, 2, 1, *range(3, 3 + nd)])
    w = w.reshape((groups * og, cin // groups, *kernel)).flip(range(2, 2 + nd))
    y = _conv(x.with_view(st), weight.with_view(w), bias, 1, 0, dilation, groups, nd, op)
    return _unbatch(y, unbatched)


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 1, "conv_transpose1d")


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 2, "conv_transpose2d")


# ---- pooling ------------------------------------------------------------------------------------------


def _pool_geometry(x: Tensor, kernel_size, stride, padding, dilation, ceil_mode: bool, nd: int, op: str):
    """(kernel, stride, dilation, pads) for torch's pooling_output_shape.

    With ceil_mode a last, partial window counts when it starts inside the input or the left padding; extra
    right padding (-Y mod s, for Y = i + 2p - d (k - 1) - 1) makes the windows that fit exactly those.
    """
    kernel = _tuple(kernel_size, nd, "kernel_size", op)
    stride = kernel if stride is None or stride == [] or stride == () else _tuple(stride, nd, "stride", op)
    padding, dilation = _tuple(padding, nd, "padding", op), _tuple(dilation, nd, "dilation", op)
    if any(2 * p > d * (k - 1) + 1 for k, p, d in zip(kernel, padding, dilation)):
        raise ValueError(f"{op}: padding {padding} should be at most half of the kernel {kernel}")
    pads = []
    for i, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation):
        extra = 0
        if ceil_mode:
            span = as_expr(i) + 2 * p - d * (k - 1) - 1
            starts_past = ((span + s - 1) // s) * s >= as_expr(i) + p  # 1 when the partial window would start late
            extra = as_dim((((-span) % s) * (1 - starts_past)).max(0))  # max: a bound the view checks can see
        pads.append((p, as_dim(p + extra)))
    return kernel, stride, dilation, pads


def _reduce_windows(win: Tensor, nd: int, reducer) -> Tensor:
    """Merge the trailing kernel axes into one and reduce it."""
    shape = win.shape
    merged = win.with_view(win.st.reshape((*shape[:-nd], as_dim(dims_product(shape[-nd:])))))
    return reducer(merged, merged.ndim - 1)


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nd, op) -> Tensor:
    if return_indices:
        raise NotImplementedError(f"{op}: return_indices=True is not supported")
    x, unbatched = _batched(x, nd, op)
    kernel, stride, dilation, pads = _pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, nd, op)
    if any(p != (0, 0) for p in pads):
        # Padding must read -inf, but pad views read 0: add log2 of a padded ones-view, which is
        # log2(1) = 0 inside and log2(0) = -inf in the padding (exactly, no select needed).
        if not x.dtype.is_float:
            raise NotImplementedError(f"{op}: padded max pooling needs a floating-point input, got {x.dtype.name}")
        ones = prim.scalar(x.graph, 1, x.dtype, x.shape)
        mask = prim.log2(ones.with_view(ones.st.pad([(0, 0), (0, 0), *pads])))
        padded = prim.add(x.with_view(x.st.pad([(0, 0), (0, 0), *pads])), mask)
        win = _windows(padded, kernel, stride, dilation, [(0, 0)] * nd, op)
    else:
        win = _windows(x, kernel, stride, dilation, pads, op)
    return _unbatch(_reduce_windows(win, nd, prim.max_reduce), unbatched)


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1, "max_pool1d")


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2, "max_pool2d")


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nd, op) -> Tensor:
    """sum over the window / divisor; torch's divisor counts padding (if asked) but never the ceil_mode overhang."""
    from luminal.hl import elementwise as E

    x, unbatched = _batched(x, nd, op)
    kernel, stride, dilation, pads = _pool_geometry(x, kernel_size, stride, padding, 1, ceil_mode, nd, op)
    total = _reduce_windows(_windows(x, kernel, stride, dilation, pads, op), nd, prim.sum_reduce)
    overhang = any(hi != lo for lo, hi in pads)
    if divisor_override is not None:
        y = E.div(total, divisor_override)
    elif not overhang and (count_include_pad or all(lo == 0 for lo, _ in pads)):
        y = E.div(total, math.prod(kernel))  # every window is full
    else:  # count, per window, the positions that are input (or padding, if included): a sum over a ones-view
        counted = [as_dim(as_expr(i) + 2 * lo) if count_include_pad else i for i, (lo, _) in zip(x.shape[2:], pads)]
        ones = prim.scalar(x.graph, 1, x.dtype, (1, 1, *counted))
        edges = [(0, as_dim(as_expr(hi) - lo)) if count_include_pad else (lo, hi) for lo, hi in pads]
        count = _reduce_windows(_windows(ones, kernel, stride, dilation, edges, op), nd, prim.sum_reduce)
        y = E.div(total, count)
    return _unbatch(y, unbatched)


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1, "avg_pool1d")


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2, "avg_pool2d")


def _adaptive_last(x: Tensor, out: Dim) -> Tensor:
    """Average the last axis (size i) into `out` bins, bin o covering [floor(o i / out), ceil((o + 1) i / out))."""
    from luminal.hl import elementwise as E
    from luminal.hl import reduction as R
    from luminal.hl.linalg import matmul

    *lead, i = x.shape
    if isinstance(i, int) and isinstance(out, int) and i % out == 0:  # equal bins: a reshape and a mean
        bins = x.with_view(x.st.reshape((*lead, out, i // out)))
        return E.div(R.sum(bins, -1), i // out)
    # Otherwise a matmul with the averaging matrix A[j, o] = [start(o) <= j < end(o)] / (end(o) - start(o)).
    from luminal.view import idx

    j, o = idx(0, i), idx(1, out)
    start, end = (o * i) // out, ((o + 1) * i + out - 1) // out
    inside = prim.cast(prim.iota(x.graph, (j >= start) & (j < end), (i, out)), x.dtype)
    width = prim.cast(prim.iota(x.graph, end - start, (1, out)), x.dtype)
    return matmul(x, E.mul(inside, prim.recip(width)))


def _adaptive_avg_pool(x: Tensor, output_size, nd: int, op: str) -> Tensor:
    x, unbatched = _batched(x, nd, op)
    sizes = (output_size,) * nd if not isinstance(output_size, (tuple, list)) else tuple(output_size)
    if len(sizes) != nd:
        raise ValueError(f"{op}: output_size must be an int or {nd} sizes, got {output_size!r}")
    sizes = [x.shape[2 + j] if s is None else s for j, s in enumerate(sizes)]  # None keeps the input size
    for j in reversed(range(nd)):  # pool axis 2 + j: move it last, pool, move it back
        order = [*range(2 + j), *range(3 + j, x.ndim), 2 + j]
        y = _adaptive_last(x.with_view(x.st.permute(order)), sizes[j])
        x = y.with_view(y.st.permute([order.index(k) for k in range(x.ndim)]))
    return _unbatch(x, unbatched)


def adaptive_avg_pool1d(x: Tensor, output_size) -> Tensor:
    return _adaptive_avg_pool(x, output_size, 1, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(x: Tensor, output_size) -> Tensor:
    return _adaptive_avg_pool(x, output_size, 2, "adaptive_avg_pool2d")


METHODS: tuple[str, ...] = ()

__all__ = [
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "max_pool1d",
    "max_pool2d",
    "avg_pool1d",
    "avg_pool2d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
]
