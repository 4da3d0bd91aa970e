"""Q8_0 weights: int8 values in blocks of 32 along the contraction, one float32 scale per block (llama.cpp's
layout, and what Luminal serves Llama 3 8B in).

A float weight w [N, K] becomes q int8 [N, K] and scale float32 [N, K / 32] with
    scale[n, b] = max |w[n, 32 b : 32 b + 32]| / 127,   q = round_half_even(w / scale)   (0 where scale is 0),
so |q| <= 127 and w ~ q * scale, off by at most half a scale. In a graph the weight is recorded as
`dequantize(q, scale)`: cast q to float32, multiply by the scale broadcast over its block. That is the exact
meaning the reference interpreter runs; the CPU compiler reads q and the scales inside the GEMM/GEMV kernel
(compiler/cpu/codegen_qgemm.py), so the float weight is never materialised.

quantize="w8a8" adds llama.cpp's Q8_0 x Q8_0 scheme: each projection's input row goes through Q8_0 too
(`quantize_activations`, in the graph, so the reference interpreter computes the meaning), and the CPU GEMM
multiplies int8 by int8 in integer lanes, one float multiply-add per block of 32.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from luminal import dtypes as dt
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape

BLOCK = 32  # values per scale, along the contraction (Q8_0)
QUANTIZATIONS = ("int8", "w8a8")  # what `quantize=` accepts besides None (w8a8: int8's weights, Q8_0 inputs)
ACTIVATIONS = ("w8a8",)  # the schemes that also quantise each projection's input row
SCALE_SUFFIX = "_scale"  # a quantised weight "x.weight" is stored as int8 "x.weight" beside "x.weight_scale"


def check_quantize(quantize: str | None) -> str | None:
    """`quantize` itself when it names a supported scheme (or is None); a clear ValueError otherwise."""
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize={quantize!r}: supported are {', '.join(QUANTIZATIONS)} (or none for float32)")
    return quantize


def quantize_q8_0(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q int8 [..., N, K], scale float32 [..., N, K / 32]) of a float weight [..., N, K] with K a multiple of 32:
    a matrix, or a stack of them (a mixture's experts), each row quantised on its own."""
    w = np.asarray(w)
    if w.ndim < 2 or w.shape[-1] % BLOCK or not np.issubdtype(w.dtype, np.floating):
        raise ShapeError(f"Q8_0 quantises a float [N, K] weight with K a multiple of {BLOCK}, got {w.dtype}{w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("Q8_0: the weight holds nan or inf")
    blocks = w.astype(np.float32).reshape(*w.shape[:-1], -1, BLOCK)
    scale = (np.abs(blocks).max(-1) / np.float32(127)).astype(np.float32)
    safe = np.where(scale == 0, np.float32(1), scale)[..., None]
    q = np.clip(np.rint(blocks / safe), -127, 127).astype(np.int8)  # np.rint rounds half to even
    return q.reshape(w.shape), scale


def dequantize_q8_0(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The float32 weight [..., N, K] that (q, scale) stand for: what the graph's dequantize computes."""
    return (q.astype(np.float32).reshape(*q.shape[:-1], -1, BLOCK) * scale[..., None]).reshape(q.shape)


def dequantize(q: Tensor, scale: Tensor) -> Tensor:
    """float32 [..., N, K] from int8 q [..., N, K] and scale [..., N, K / 32]: cast, times the scale broadcast over
    its block. A matrix records exactly the ops the CPU GEMM recognises (compiler/cpu/fuse_dequant.py); leading
    dimensions (experts gathered per token) only widen each reshape."""
    *lead, n, k = q.shape
    if q.dtype != dt.int8 or scale.dtype != dt.float32 or tuple(scale.shape) != (*lead, n, k // BLOCK) or k % BLOCK:
        raise ShapeError(
            f"dequantize: q int8 [..., N, K] (K % {BLOCK} == 0) and scale float32 [..., N, K/{BLOCK}] expected, got "
            f"{q.dtype}{format_shape(q.shape)} and {scale.dtype}{format_shape(scale.shape)}"
        )
    blocks = q.to(dt.float32).reshape(*lead, n, k // BLOCK, BLOCK)
    return (blocks * scale.reshape(*lead, n, k // BLOCK, 1)).reshape(*lead, n, k)


# Rounding to the nearest integer, ties to even, in two float32 additions for |t| < 2**22: the sum with 1.5 * 2**23
# lies in [2**23, 2**24), where float32 keeps no fraction bits, and subtracting it back is exact. The compiler
# never reassociates float additions (compiler/search/rules_algebra.py), and C runs without -ffast-math.
_ROUNDER = 1.5 * 2**23
_TINY = 2.0**-126  # the smallest normal float32: a block whose scale is below it quantises to zeros


def quantize_activations(x: Tensor) -> Tensor:
    """x [..., K] (K % 32 == 0) through Q8_0 and back, row by row: per block of 32 along K, scale = max |x| / 127
    and q = round-half-even(x * (1 / scale)), as int8, times the scale. |q| <= 127 with no clamp: |x| <= max |x|,
    so x / scale is at most 127 plus a few float32 roundings. A block whose scale is 0 or subnormal (whose
    reciprocal would overflow) quantises to zeros. Each row's result depends on that row alone."""
    *lead, k = x.shape
    if x.dtype != dt.float32 or not isinstance(k, int) or k % BLOCK:
        raise ShapeError(
            f"quantize_activations: float32 [..., K] with K % {BLOCK} == 0, got {x.dtype}{format_shape(x.shape)}"
        )
    blocks = x.reshape(*lead, k // BLOCK, BLOCK)
    scale = blocks.abs().amax(-1) / 127
    inverse = (scale + (scale < _TINY).to(dt.float32)).reciprocal()  # 1 where the block quantises to zeros
    t = blocks * inverse.unsqueeze(-1)
    q = ((t + _ROUNDER) - _ROUNDER).to(dt.int8)
    return dequantize(q.reshape(*lead, k), scale)


def quantize_weights(weights: Mapping[str, Any], names: set[str]) -> dict[str, np.ndarray]:
    """`weights` with each float weight named in `names` replaced by its Q8_0 pair (name, name + SCALE_SUFFIX)."""
    out: dict[str, np.ndarray] = {}
    for name, value in weights.items():
        if name in names:
            out[name], out[name + SCALE_SUFFIX] = quantize_q8_0(np.asarray(value))
        else:
            out[name] = value
    return out


__all__ = [
    "ACTIVATIONS",
    "BLOCK",
    "QUANTIZATIONS",
    "SCALE_SUFFIX",
    "check_quantize",
    "dequantize",
    "dequantize_q8_0",
    "quantize_activations",
    "quantize_q8_0",
    "quantize_weights",
]
