"""Linear algebra and the layers of a network: MatMul, Gemm, Einsum, Conv, ConvTranspose, pooling, Dropout.

Convolutions go through luminal.functional's conv ops; ONNX's asymmetric padding (pads = [begins..., ends...])
becomes an explicit zero pad first. Pools follow ONNX's geometry: out = floor or ceil((i + pads - d (k - 1) - 1)
/ s) + 1, a ceil-mode window that would start past the input and its leading pad dropped, and window positions
past the padded input excluded (never counted by an average).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
from luminal.hl import prim
from luminal.hl.conv import _conv_transpose, _windows
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import require_float
from luminal.onnx.registry import translates
from luminal.onnx.scope import materialize
from luminal.tensor import Tensor
from luminal.view import idx


@translates("MatMul")
def matmul(ctx: NodeContext) -> Tensor:
    return F.matmul(ctx.x(0), ctx.x(1))


@translates("Gemm", attrs={"alpha", "beta", "transA", "transB"})
def gemm(ctx: NodeContext) -> Tensor:
    """Y = alpha A' B' + beta C, with A' and B' transposed when asked and C broadcast."""
    a, b = ctx.x(0), ctx.x(1)
    a = a.transpose(0, 1) if ctx.attr("transA", 0) else a
    b = b.transpose(0, 1) if ctx.attr("transB", 0) else b
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    y = F.matmul(a, b)
    if alpha != 1.0:
        y = F.mul(y, alpha)
    if ctx.has(2):
        c = ctx.x(2)
        y = F.add(y, F.mul(c, beta) if beta != 1.0 else c)
    return y


@translates("Det")
def det(ctx: NodeContext) -> Tensor:
    """The determinant of [..., n, n] by Leibniz's sum over permutations (n! terms: small matrices only)."""
    x = require_float(ctx, ctx.x(0))
    n = x.shape[-1]
    if not isinstance(n, int) or x.shape[-2] != n or n > 6:
        raise ctx.unsupported(f"matrices of shape {x.shape[-2:]} are not supported (square, at most 6 x 6)")
    total = None
    for perm in itertools.permutations(range(n)):
        inversions = sum(1 for i in range(n) for j in range(i + 1, n) if perm[i] > perm[j])
        term = x[..., 0, perm[0]]
        for row in range(1, n):
            term = F.mul(term, x[..., row, perm[row]])
        term = F.neg(term) if inversions % 2 else term
        total = term if total is None else F.add(total, term)
    return total


@translates("Einsum", attrs={"equation"})
def einsum(ctx: NodeContext) -> Tensor:
    return F.einsum(ctx.attr("equation").replace(" ", ""), *ctx.inputs())


@translates("Dropout", attrs={"ratio", "seed", "is_test"})
def dropout(ctx: NodeContext) -> tuple[Tensor, Tensor]:
    """The identity at inference (its mask all True); training mode would draw random numbers."""
    training = bool(np.asarray(ctx.const(2, "training_mode")).reshape(-1)[0]) if ctx.has(2) else False
    ratio = float(np.asarray(ctx.const(1, "ratio")).reshape(-1)[0]) if ctx.has(1) else 0.5
    if training and ratio != 0:  # with ratio 0 training drops nothing: the identity again
        raise ctx.unsupported("training_mode=True is not supported (a graph has no random numbers)")
    x = ctx.x(0)
    mask = F.ones_like(x, dtype=dt.bool_) if ctx.wants(1) else None
    return x, mask


# ---- geometry ---------------------------------------------------------------------------------------------


def _spatial(ctx: NodeContext, x: Tensor, kernel: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(strides, dilations, input sizes) of the spatial axes, checked to be concrete."""
    nd = len(kernel)
    sizes = list(x.shape[2:])
    if len(sizes) != nd:
        raise ctx.error(f"input {x.shape} does not have {nd} spatial dims for kernel {kernel}")
    if not all(isinstance(i, int) for i in sizes):
        raise ctx.unsupported(f"symbolic spatial dims {x.shape} are not supported")
    strides = list(ctx.attr("strides", [1] * nd))
    dilations = list(ctx.attr("dilations", [1] * nd))
    return strides, dilations, sizes


def _pads(ctx: NodeContext, sizes, kernel, strides, dilations, window_of_auto_pad) -> list[tuple[int, int]]:
    """(begin, end) per spatial axis from `pads` or `auto_pad`. SAME pads so that out = ceil(i / s), the odd
    element at the end (SAME_UPPER) or the beginning (SAME_LOWER)."""
    nd = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0] * 2 * nd))
        return [(pads[j], pads[nd + j]) for j in range(nd)]
    if auto == "VALID":
        return [(0, 0)] * nd
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto!r}")
    out = []
    for i, k, s, d in zip(sizes, kernel, strides, dilations):
        o = -(-i // s)
        total = max((o - 1) * s + window_of_auto_pad(k, d) - i, 0)
        small, large = total // 2, total - total // 2
        out.append((small, large) if auto == "SAME_UPPER" else (large, small))
    return out


def _pad_input(x: Tensor, pads: list[tuple[int, int]], value: float = 0.0) -> Tensor:
    widths = [w for lo, hi in reversed(pads) for w in (lo, hi)]  # F.pad lists the last axis first
    return F.pad(x, widths, value=value) if any(widths) else x


# ---- convolution --------------------------------------------------------------------------------------------


@translates("Conv", attrs={"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
def conv(ctx: NodeContext) -> Tensor:
    return convolve(ctx, require_float(ctx, ctx.x(0)), ctx.x(1), ctx.x(2) if ctx.has(2) else None)


def convolve(ctx: NodeContext, x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """Conv's computation on given tensors, with the node's attributes (ConvInteger and QLinearConv share it)."""
    kernel = list(ctx.attr("kernel_shape", w.shape[2:]))
    if list(w.shape[2:]) != kernel or len(kernel) not in (1, 2, 3):
        raise ctx.error(f"kernel_shape {kernel} does not match weight {w.shape} (1 to 3 spatial dims)")
    strides, dilations, sizes = _spatial(ctx, x, kernel)
    pads = _pads(ctx, sizes, kernel, strides, dilations, lambda k, d: (k - 1) * d + 1)
    symmetric = all(lo == hi for lo, hi in pads)
    padding = [lo for lo, _ in pads] if symmetric else 0
    x = x if symmetric else _pad_input(x, pads)
    fn = (F.conv1d, F.conv2d, F.conv3d)[len(kernel) - 1]
    return fn(x, w, bias, stride=strides, padding=padding, dilation=dilations, groups=int(ctx.attr("group", 1)))


@translates(
    "ConvTranspose",
    attrs={"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"},
)
def conv_transpose(ctx: NodeContext) -> Tensor:
    """The full transposed convolution (length s (i - 1) + d (k - 1) + 1), then cropped by the begin and end
    pads and extended by output_padding (positions no input reaches: zero before the bias)."""
    x, w = require_float(ctx, ctx.x(0)), ctx.x(1)
    kernel = list(ctx.attr("kernel_shape", w.shape[2:]))
    nd = len(kernel)
    strides, dilations, sizes = _spatial(ctx, x, kernel)
    extra = list(ctx.attr("output_padding", [0] * nd))
    full = [s * (i - 1) + d * (k - 1) + 1 for i, k, s, d in zip(sizes, kernel, strides, dilations)]
    auto = ctx.attr("auto_pad", "NOTSET")
    if "output_shape" in ctx.attrs or auto in ("SAME_UPPER", "SAME_LOWER"):
        wanted = list(ctx.attr("output_shape", [i * s for i, s in zip(sizes, strides)]))[-nd:]
        totals = [f + e - o for f, e, o in zip(full, extra, wanted)]
        upper = auto == "SAME_UPPER"
        pads = [(t // 2, t - t // 2) if upper else (t - t // 2, t // 2) for t in totals]
    elif auto == "VALID" or auto in ("NOTSET", ""):
        p = list(ctx.attr("pads", [0] * 2 * nd)) if auto != "VALID" else [0] * 2 * nd
        pads = [(p[j], p[nd + j]) for j in range(nd)]
    else:
        raise ctx.error(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto!r}")
    group = int(ctx.attr("group", 1))
    y = _conv_transpose(x, w, None, strides, 0, 0, group, dilations, nd, "ConvTranspose")
    y = _pad_input(y, [(-lo, e - hi) for (lo, hi), e in zip(pads, extra)])
    if ctx.has(2):
        b = ctx.x(2)
        y = F.add(y, F.reshape(b, [b.shape[0]] + [1] * nd))
    return y


@translates("CausalConvWithState", attrs={"activation"})
def causal_conv_with_state(ctx: NodeContext) -> tuple[Tensor, Tensor]:
    """A depthwise causal 1-D convolution continuing from past_state (the previous k - 1 inputs, zeros when
    absent); present_state is the last k - 1 inputs of the padded sequence, for the next call."""
    x, w = require_float(ctx, ctx.x(0)), ctx.x(1)
    activation = ctx.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise ctx.error(f"activation must be none, silu or swish, got {activation!r}")
    if x.ndim != 3 or w.ndim != 3:
        raise ctx.error(f"input [B, C, L] and weight [C, 1, k] expected, got {x.shape} and {w.shape}")
    b, c, _ = x.shape
    k = w.shape[2]
    past = ctx.x(3) if ctx.has(3) else F.pad(x[:, :, :0], [k - 1, 0])
    padded = F.cat([past, x], 2) if k > 1 else x
    y = F.conv1d(padded, w, ctx.x(2) if ctx.has(2) else None, groups=c)
    if activation != "none":
        y = F.silu(y)
    n = padded.shape[2]
    return y, padded[:, :, n - (k - 1) :] if isinstance(n, int) else padded[:, :, k - 1 :][:, :, : k - 1]


@translates("Col2Im", attrs={"dilations", "pads", "strides"})
def col2im(ctx: NodeContext) -> Tensor:
    """Sum sliding blocks [N, C * prod(block), L] back into an image [N, C, *image_shape]: a transposed
    convolution whose kernel routes block column j to kernel position j (an identity per channel)."""
    x = require_float(ctx, ctx.x(0))
    image, block = ctx.ints(1, "image_shape"), ctx.ints(2, "block_shape")
    nd = len(image)
    strides = list(ctx.attr("strides", [1] * nd))
    dilations = list(ctx.attr("dilations", [1] * nd))
    p = list(ctx.attr("pads", [0] * 2 * nd))
    pads = [(p[j], p[nd + j]) for j in range(nd)]
    k = math.prod(block)
    n, ck, _ = x.shape
    c = ck // k
    outs = [
        (i + lo + hi - d * (b - 1) - 1) // s + 1 for i, b, s, d, (lo, hi) in zip(image, block, strides, dilations, pads)
    ]
    cols = F.reshape(x, [n, ck, *outs])
    route = np.zeros((ck, 1, k), dtype=np.float32)
    route[np.arange(ck), 0, np.arange(ck) % k] = 1.0  # channel c * k + j feeds kernel position j of output c
    weight = F.cast(materialize(x.graph, "col2im_route", route.reshape(ck, 1, *block)), x.dtype)
    y = _conv_transpose(cols, weight, None, strides, 0, 0, c, dilations, nd, "Col2Im")
    full = y.shape[2:]
    return _pad_input(y, [(-lo, i - (f - lo)) for (lo, _), i, f in zip(pads, image, full)])


# ---- pooling -------------------------------------------------------------------------------------------------


def _pool(ctx: NodeContext, kind: str) -> Tensor:
    x = ctx.x(0)
    if kind != "max":
        require_float(ctx, x)
    if x.dtype == dt.bool_:
        raise ctx.unsupported("bool inputs are not supported")
    kernel = list(ctx.attr("kernel_shape"))
    nd = len(kernel)
    strides, dilations, sizes = _spatial(ctx, x, kernel)
    pads = _pads(ctx, sizes, kernel, strides, dilations, lambda k, d: k)  # (ONNX's SAME ignores dilation here)
    ceil = bool(ctx.attr("ceil_mode", 0))
    outs, overhang = [], []
    for i, k, s, d, (lo, hi) in zip(sizes, kernel, strides, dilations, pads):
        span = i + lo + hi - d * (k - 1) - 1
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= i + lo:  # the last window must start inside the input or its leading pad
            o -= 1
        outs.append(o)
        overhang.append(max((o - 1) * s + d * (k - 1) + 1 - (i + lo + hi), 0))
    reach = [(lo, hi + e) for (lo, hi), e in zip(pads, overhang)]  # padding plus the overhang windows reach into
    if kind == "max":
        low = float("-inf") if x.dtype.is_float else int(np.iinfo(x.dtype.np).min)
        values = _pad_input(x, reach, low)
    elif kind == "lp":
        p = int(ctx.attr("p", 2))
        values = _pad_input(F.pow(F.abs(x), float(p)), reach)
    else:
        values = _pad_input(x, reach)
    win = _windows(values, kernel, strides, dilations, [(0, 0)] * nd, ctx.op_type)
    win = win[(slice(None), slice(None), *(slice(0, o) for o in outs))]
    flat = F.reshape(win, [*win.shape[: 2 + nd], math.prod(kernel)])
    if kind == "max":
        return (F.amax(flat, -1), _argmax_positions(ctx, x, flat, kernel, strides, dilations, pads))
    total = F.sum(flat, -1)
    if kind == "lp":
        return F.pow(total, 1.0 / int(ctx.attr("p", 2)))
    # the count of each window: input positions, plus the explicit padding when count_include_pad
    include = bool(ctx.attr("count_include_pad", 0))
    ones = F.ones_like(x[:1, :1])
    counted = _pad_input(ones, pads, 1.0 if include else 0.0)
    counted = _pad_input(counted, [(0, e) for e in overhang])
    cwin = _windows(counted, kernel, strides, dilations, [(0, 0)] * nd, ctx.op_type)
    cwin = cwin[(slice(None), slice(None), *(slice(0, o) for o in outs))]
    count = F.sum(F.reshape(cwin, [*cwin.shape[: 2 + nd], math.prod(kernel)]), -1)
    return F.div(total, count)


_POOL_ATTRS = {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides"}


@translates("MaxPool", attrs=_POOL_ATTRS | {"storage_order"})
def max_pool(ctx: NodeContext) -> tuple[Tensor, Tensor | None]:
    values, positions = _pool(ctx, "max")
    return values, positions() if ctx.wants(1) else None


def _argmax_positions(ctx: NodeContext, x: Tensor, flat: Tensor, kernel, strides, dilations, pads):
    """MaxPool's Indices, built only when asked for: the flat input position of each window's first maximum,
    row-major over [N, C, *spatial] (storage_order 1: the spatial axes column-major)."""

    def build() -> Tensor:
        nd = len(kernel)
        which = F.argmax(flat, -1)  # [N, C, *outs]: the kernel position, row-major over the kernel
        n, c, *sizes = x.shape
        shape = list(which.shape)
        coords = []
        rest = which
        for j in reversed(range(nd)):  # kernel offset on axis j, from the last axis
            kk = F.remainder(rest, kernel[j]) if j else rest
            rest = F.floor_divide(rest, kernel[j])
            start = prim.iota(x.graph, idx(2 + j, shape[2 + j]) * strides[j] - pads[j][0], shape)
            coords.insert(0, F.add(start, F.mul(kk, dilations[j])))
        spatial = None
        order = range(nd) if not ctx.attr("storage_order", 0) else reversed(range(nd))
        for j in order:
            spatial = coords[j] if spatial is None else F.add(F.mul(spatial, sizes[j]), coords[j])
        plane = prim.iota(x.graph, (idx(0, n) * c + idx(1, c)) * math.prod(sizes), shape)
        return F.add(plane, spatial)

    return build


@translates("AveragePool", attrs=_POOL_ATTRS | {"count_include_pad"})
def average_pool(ctx: NodeContext) -> Tensor:
    return _pool(ctx, "avg")


@translates("LpPool", attrs=_POOL_ATTRS | {"p"})
def lp_pool(ctx: NodeContext) -> Tensor:
    return _pool(ctx, "lp")


@translates("GlobalAveragePool")
def global_average_pool(ctx: NodeContext) -> Tensor:
    x = require_float(ctx, ctx.x(0))
    return F.mean(x, list(range(2, x.ndim)), keepdim=True)


@translates("GlobalMaxPool")
def global_max_pool(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    return F.amax(x, list(range(2, x.ndim)), keepdim=True)
