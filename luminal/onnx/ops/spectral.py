"""DFT: the discrete Fourier transform as matrix products with cosine and sine tables (the tables depend only
on lengths, so they are computed at import in float64). Complex values live in a trailing axis of size 2
(real, imaginary); a trailing axis of size 1 is a real signal.

forward  X[k] = sum_t x[t] e^(-2 pi i k t / L)            (onesided keeps k <= L / 2)
inverse  x[t] = 1 / L sum_k X[k] e^(2 pi i k t / L)       (onesided: X holds k <= L / 2 of a real signal)
"""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis, require_float
from luminal.onnx.registry import translates
from luminal.onnx.scope import materialize
from luminal.tensor import Tensor


def _table(x: Tensor, values: np.ndarray) -> Tensor:
    return F.cast(materialize(x.graph, "dft_table", values.astype(np.float32)), x.dtype)


@translates("DFT", attrs={"axis", "inverse", "onesided"})
def dft(ctx: NodeContext) -> Tensor:
    x = require_float(ctx, ctx.x(0))
    if ctx.opset >= 20:
        a = int(np.asarray(ctx.const(2, "axis")).reshape(-1)[0]) if ctx.has(2) else -2
    else:
        a = int(ctx.attr("axis", 1))
    a = axis(ctx, a, x.ndim)
    if a == x.ndim - 1 or x.shape[-1] not in (1, 2):
        raise ctx.error(f"input {x.shape} must end in a complex axis of 1 or 2 and transform another axis")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    n_in = x.shape[a]
    if ctx.has(1):
        length = int(np.asarray(ctx.const(1, "dft_length")).reshape(-1)[0])
    else:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    signal = F.movedim(x, a, -2)  # [..., n, 1 or 2]
    real = signal[..., 0]
    imag = signal[..., 1] if x.shape[-1] == 2 else None
    if inverse and onesided:  # a real signal from the bins k <= L / 2 (the rest are their conjugates)
        used = min(n_in, length // 2 + 1)
        k, t = np.arange(used)[:, None], np.arange(length)[None, :]
        twice = np.where((k == 0) | (2 * k == length), 1.0, 2.0)  # k and L - k both hold X[k]'s weight
        theta = 2 * np.pi * k * t / length
        out = F.matmul(real[..., :used], _table(x, twice * np.cos(theta) / length))
        if imag is not None:
            out = F.add(out, F.matmul(imag[..., :used], _table(x, -twice * np.sin(theta) / length)))
        return F.movedim(F.unsqueeze(out, -1), -2, a)
    used = min(n_in, length)
    bins = length // 2 + 1 if onesided else length
    t, k = np.arange(used)[:, None], np.arange(bins)[None, :]
    theta = 2 * np.pi * t * k / length
    scale = 1 / length if inverse else 1.0
    cos, sin = np.cos(theta) * scale, np.sin(theta) * scale * (1 if inverse else -1)  # e^(+-i theta)
    real, imag = real[..., :used], imag[..., :used] if imag is not None else None
    out_re = F.matmul(real, _table(x, cos))  # (a + ib)(c + id) = (ac - bd) + i(ad + bc)
    out_im = F.matmul(real, _table(x, sin))
    if imag is not None:
        out_re = F.sub(out_re, F.matmul(imag, _table(x, sin)))
        out_im = F.add(out_im, F.matmul(imag, _table(x, cos)))
    return F.movedim(F.stack([out_re, out_im], -1), -2, a)
