"""Attention: scaled dot-product attention (masks, causal, grouped-query), rotary embeddings, dropout.

Masks become additive biases with one exact identity, log2 of a 0/1 tensor: log2(1) = 0 where a position
may be attended and log2(0) = -inf where it may not, so no select op is needed.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes

from luminal import dtypes as dt
from luminal.hl import prim
from luminal.symbolic import Dim
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape, idx

LOG2_E = 1 / math.log(2)  # e^x = 2^(x log2 e)


def _bias_from_bool(allowed: Tensor, dtype: dt.DType) -> Tensor:
    return prim.log2(prim.cast(allowed, dtype))  # True -> log2(1) = 0, False -> log2(0) = -inf


def causal_mask(graph, q_len: Dim, kv_len: Dim) -> Tensor:
    """bool [q_len, kv_len], True where key j <= query i (torch's tril(ones(L, S)), top-left aligned)."""
    i, j = idx(0, q_len), idx(1, kv_len)
    return prim.cast(prim.iota(graph, j < i + 1, (q_len, kv_len), dt.int32), dt.bool_)


def _safe_softmax(scores: Tensor) -> Tensor:
    """Softmax over the last axis that gives 0, not nan, on a fully masked (all -inf) row, as torch's SDPA does.

    The row max is clamped to the lowest finite value, so a masked row computes exp2(-inf) = 0 everywhere and
    sums to 0; any other row sums to at least 1 (its max contributes 2^0), so adding [sum < 0.5] to the sum
    changes nothing there and turns 0 / 0 into 0 / 1.
    """
    from luminal.hl import comparison as C
    from luminal.hl import elementwise as E
    from luminal.hl import reduction as R

    lowest = float(ml_dtypes.finfo(scores.dtype.np).min)
    peak = C.maximum(R.amax(scores, -1, keepdim=True), lowest)
    e = prim.exp2(E.mul(E.sub(scores, peak), LOG2_E))
    total = R.sum(e, -1, keepdim=True)
    empty = prim.cast(prim.less_than(total, prim.full_like(total, 0.5)), total.dtype)
    return E.mul(e, prim.recip(prim.add(total, empty)))  # e / (sum + [sum == 0])


def _repeat_heads(x: Tensor, groups: int) -> Tensor:
    """[..., Hk, S, E] -> [..., Hk * groups, S, E], head h reading kv head h // groups (repeat_interleave), a view."""
    *lead, hk, s, e = x.shape
    st = x.st.reshape((*lead, hk, 1, s, e)).expand((*lead, hk, groups, s, e))
    return x.with_view(st.reshape((*lead, hk * groups, s, e)))


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    softcap: float | None = None,
) -> Tensor:
    """softmax(q k^T * scale + mask) v over [..., heads, L, E] x [..., kv heads, S, E] x [..., kv heads, S, Ev].

    A bool mask is True where attention is allowed; a float mask is added to the scores. Rows with nothing to
    attend give zeros, as torch does. `softcap` (not torch's: Gemma 2's attention logit soft-capping) squashes
    the scaled scores to softcap * tanh(scores / softcap) before the mask is added.
    """
    from luminal.hl import elementwise as E
    from luminal.hl.activation import soft_cap
    from luminal.hl.linalg import matmul

    if dropout_p > 0.0:
        raise NotImplementedError(
            "scaled_dot_product_attention: dropout_p > 0 needs randomness; graphs are inference-only"
        )
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ShapeError("scaled_dot_product_attention: query, key and value need at least 2 dims")
    shapes = f"query {format_shape(query.shape)}, key {format_shape(key.shape)}, value {format_shape(value.shape)}"
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: mismatched embedding or sequence dims: {shapes}")
    if query.dtype != key.dtype or key.dtype != value.dtype or not query.dtype.is_float:
        raise dt.DTypeError(
            f"scaled_dot_product_attention: query, key and value must share one floating dtype ({shapes})"
        )
    out_dtype = query.dtype
    if out_dtype.bits < 32:  # half inputs compute in float32, as torch's kernels accumulate (scores stay f32)
        query, key, value = (prim.cast(t, dt.float32) for t in (query, key, value))
    if enable_gqa and query.ndim >= 3 and key.ndim >= 3 and query.shape[-3] != key.shape[-3]:
        hq, hk = query.shape[-3], key.shape[-3]
        if not isinstance(hq, int) or not isinstance(hk, int) or hq % hk:
            raise ShapeError(
                f"scaled_dot_product_attention: {hq} query heads are not a whole multiple of {hk} kv heads ({shapes})"
            )
        key, value = _repeat_heads(key, hq // hk), _repeat_heads(value, hq // hk)
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or is_causal=True, not both")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale  # needs a concrete head dim
    k_t = key.with_view(key.st.permute([*range(key.ndim - 2), key.ndim - 1, key.ndim - 2]))
    scores = E.mul(matmul(query, k_t), scale)  # [..., L, S]
    if softcap is not None:
        scores = soft_cap(scores, softcap)
    if is_causal:
        attn_mask = causal_mask(query.graph, query.shape[-2], key.shape[-2])
    if attn_mask is not None:
        bias = _bias_from_bool(attn_mask, scores.dtype) if attn_mask.dtype == dt.bool_ else attn_mask
        scores = E.add(scores, bias)
    return prim.cast(matmul(_safe_softmax(scores), value), out_dtype)


# ---- rotary position embedding ---------------------------------------------------------------------


def rotate_half(x: Tensor) -> Tensor:
    """[x1, x2] -> [-x2, x1] over the last dim: swapping the halves is a flip of a [2, d/2] view, then a sign."""
    from luminal.hl import elementwise as E

    *lead, d = x.shape
    if not isinstance(d, int) or d % 2:
        raise ShapeError(f"rotate_half: the last dim must be even, got {format_shape(x.shape)}")
    swapped = x.with_view(x.st.reshape((*lead, 2, d // 2)).flip([-2]).reshape(x.shape))  # [x2, x1]
    sign = prim.cast(prim.iota(x.graph, 2 * (idx(0, d) >= d // 2) - 1, (d,), dt.int32), x.dtype)  # [-1.., +1..]
    return E.mul(swapped, sign)


def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Hugging Face's rotary embedding: x * cos + rotate_half(x) * sin, cos/sin broadcast against x."""
    from luminal.hl import elementwise as E

    return E.add(E.mul(x, cos), E.mul(rotate_half(x), sin))


def rotary_cos_sin(
    positions: Tensor, dim: int, theta: float = 10000.0, dtype: Any = dt.float32
) -> tuple[Tensor, Tensor]:
    """(cos, sin) tables [..., dim] for integer `positions` [...], as Hugging Face's default rotary embedding:

    inv_freq[j] = theta^(-2j / dim) for j < dim / 2; angle = position * inv_freq, repeated for both halves.
    """
    if dim % 2:
        raise ShapeError(f"rotary_cos_sin: dim must be even, got {dim}")
    inv_freq = rotary_inv_freq(rotary_frequency_index(positions.graph, dim), theta)
    return rotary_tables(positions, inv_freq, dtype)


def rotary_frequency_index(graph, dim: int) -> Tensor:
    """float32 [dim]: the frequency j each feature turns at, 0 .. dim/2 - 1 for both halves (rotate_half's layout)."""
    return prim.cast(prim.iota(graph, idx(0, dim) % (dim // 2), (dim,)), dt.float32)


def rotary_inv_freq(j: Tensor, theta: float) -> Tensor:
    """RoPE's default inverse frequencies theta^(-2j / dim) of a `rotary_frequency_index` j [dim]."""
    from luminal.hl import elementwise as E

    dim = j.shape[-1]
    return prim.exp2(E.mul(j, -2.0 * math.log2(theta) / dim))  # theta^(-2j/dim) = 2^(-2j log2(theta) / dim)


def rotary_tables(positions: Tensor, inv_freq: Tensor, dtype: Any = dt.float32, scale: float = 1.0):
    """(cos, sin) [..., dim] of angle = position * inv_freq, in float32 then cast to `dtype`; inv_freq [dim], or
    [..., 1, dim] with a frequency per row. `scale` multiplies both before the cast (YaRN's attention factor)."""
    from luminal.hl import elementwise as E

    pos = prim.cast(positions, dt.float32)
    angles = E.mul(pos.with_view(pos.st.reshape((*pos.shape, 1))), inv_freq)
    if scale == 1.0:
        return prim.cast(E.cos(angles), dtype), prim.cast(prim.sin(angles), dtype)
    return prim.cast(E.mul(E.cos(angles), scale), dtype), prim.cast(E.mul(prim.sin(angles), scale), dtype)


def dropout(x: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Identity at inference. (torch defaults training=True; a graph is inference-only, so here it is False.)"""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, got {p}")
    if training:
        raise NotImplementedError("dropout: training=True needs randomness; graphs are inference-only")
    return x


METHODS: tuple[str, ...] = ()

__all__ = [
    "scaled_dot_product_attention",
    "causal_mask",
    "rotate_half",
    "apply_rotary_emb",
    "rotary_cos_sin",
    "rotary_frequency_index",
    "rotary_inv_freq",
    "rotary_tables",
    "dropout",
]
