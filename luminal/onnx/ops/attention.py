"""Attention (opset 23+): scaled dot-product attention with multi/grouped/multi-query heads, 3-D or 4-D inputs,
a bool or additive mask, causal and sliding-window masks aligned bottom-right to a KV cache (past_key/value, or
nonpad_kv_seqlen), softcap, and the optional QK output.

A query row whose keys are all masked gives zeros, not nan: the softmax subtracts 0 instead of a -inf maximum,
divides by 1 instead of a zero sum, and the row is zeroed where the bias alone masks everything.
"""

from __future__ import annotations

import math

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx import types
from luminal.onnx.context import NodeContext
from luminal.onnx.registry import translates
from luminal.tensor import Tensor

NEG_INF = float("-inf")


def _heads(ctx: NodeContext, x: Tensor, heads: int | None, what: str) -> Tensor:
    """[B, S, H * E] -> [B, H, S, E] for 3-D inputs, which need the head count attribute."""
    if x.ndim == 4:
        return x
    if x.ndim != 3 or not heads:
        raise ctx.error(f"{what} must be 4-D, or 3-D with q_num_heads/kv_num_heads given (shape {x.shape})")
    b, s, hidden = x.shape
    return F.reshape(x, [b, s, heads, hidden // heads]).transpose(1, 2)


def _offset(ctx: NodeContext, q_len, past: Tensor | None, nonpad: Tensor | None):
    """The count of valid keys before the query block: the cache length, or nonpad - q_len per batch."""
    if past is not None:
        return past.shape[2]
    if nonpad is not None:
        return F.reshape(F.sub(F.cast(nonpad, dt.int64), q_len), [-1, 1, 1])  # [B, 1, 1]
    return 0


def _allowed_bias(allowed: Tensor, dtype: dt.DType) -> Tensor:
    """0 where allowed, -inf elsewhere; a per-batch [B, Q, K] mask becomes [B, 1, Q, K] to broadcast over heads."""
    bias = F.where(allowed, F.zeros_like(allowed, dtype=dtype), F.full_like(allowed, NEG_INF, dtype=dtype))
    return F.unsqueeze(bias, 1) if bias.ndim == 3 else bias


def _bias(ctx: NodeContext, q: Tensor, kv_len, past: Tensor | None, nonpad: Tensor | None) -> Tensor | None:
    g, q_len, dtype = q.graph, q.shape[2], q.dtype
    terms = []
    if ctx.has(3):
        mask = ctx.x(3)
        short = kv_len - mask.shape[-1] if isinstance(kv_len, int) and isinstance(mask.shape[-1], int) else 0
        if mask.dtype == dt.bool_:
            if short > 0:  # a mask shorter than past + new keys leaves the extra keys masked
                mask = F.pad(F.cast(mask, dt.int32), [0, short])
                mask = F.cast(mask, dt.bool_)
            terms.append(_allowed_bias(mask, dtype) if mask.ndim != 3 else F.where(mask, 0.0, NEG_INF))
        else:
            if short > 0:
                mask = F.pad(mask, [0, short], value=NEG_INF)
            terms.append(mask)
    rows = F.reshape(F.arange(g, q_len), [q_len, 1])
    cols = F.reshape(F.arange(g, kv_len), [1, kv_len])
    offset = _offset(ctx, q_len, past, nonpad)
    position = F.add(rows, offset)  # the absolute position of each query
    if ctx.attr("is_causal", 0):
        terms.append(_allowed_bias(F.le(cols, position), dtype))
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    if left >= 0:
        terms.append(_allowed_bias(F.le(F.sub(position, cols), left), dtype))
    if right >= 0:
        terms.append(_allowed_bias(F.le(F.sub(cols, position), right), dtype))
    if nonpad is not None:  # keys past each sample's valid length are padding
        valid = F.lt(cols, F.reshape(F.cast(nonpad, dt.int64), [-1, 1]))  # [B, K]
        terms.append(F.reshape(_allowed_bias(valid, dtype), [-1, 1, 1, kv_len]))
    if not terms:
        return None
    out = terms[0]
    for t in terms[1:]:
        out = F.add(out, F.cast(t, dtype))
    return F.cast(out, dtype)


def _safe_softmax(x: Tensor) -> Tensor:
    top = F.amax(x, -1, keepdim=True)
    shift = F.where(F.eq(top, NEG_INF), F.zeros_like(top), top)
    e = F.exp(F.sub(x, shift))
    total = F.sum(e, -1, keepdim=True)
    return F.div(e, F.where(F.eq(total, 0.0), F.ones_like(total), total))


@translates(
    "Attention",
    attrs={
        "is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale", "softcap",
        "softmax_precision", "left_window_size", "right_window_size",
    },
)  # fmt: skip
def attention(ctx: NodeContext) -> tuple[Tensor, ...]:
    q3 = ctx.x(0)
    if not q3.dtype.is_float:
        raise ctx.error(f"Q must be floating-point, got {q3.dtype.name}")
    q = _heads(ctx, q3, ctx.attr("q_num_heads"), "Q")
    k = _heads(ctx, ctx.x(1), ctx.attr("kv_num_heads"), "K")
    v = _heads(ctx, ctx.x(2), ctx.attr("kv_num_heads"), "V")
    past = ctx.x(4) if ctx.has(4) else None
    if past is not None:
        k, v = F.cat([past, k], 2), F.cat([ctx.x(5), v], 2)
    nonpad = ctx.x(6) if ctx.has(6) else None
    present_k, present_v = k, v
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:  # grouped or multi-query: each kv head serves hq / hk query heads
        k, v = F.repeat_interleave(k, hq // hk, 1), F.repeat_interleave(v, hq // hk, 1)
    scale = ctx.attr("scale", 1 / math.sqrt(q.shape[3]))
    root = math.sqrt(scale)  # Q and K are each scaled by sqrt(scale) (the spec's guard against overflow)
    scores = F.matmul(F.mul(q, root), F.mul(k, root).transpose(2, 3))
    softcap = ctx.attr("softcap", 0.0)
    if softcap > 0:
        scores = F.mul(F.tanh(F.div(scores, softcap)), softcap)
    qk_out = scores
    bias = _bias(ctx, q, k.shape[2], past, nonpad)
    biased = F.add(scores, bias) if bias is not None else scores
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    if mode == 2:
        qk_out = biased
    if "softmax_precision" in ctx.attrs:
        biased = F.cast(biased, types.to_luminal(int(ctx.attr("softmax_precision")), "Attention softmax_precision"))
    probs = _safe_softmax(biased)
    if bias is not None:  # rows the bias masks entirely attend nothing
        masked = F.eq(F.amax(bias, -1, keepdim=True), NEG_INF)
        probs = F.where(masked, F.zeros_like(probs), probs)
    if mode == 3:
        qk_out = probs
    elif mode not in (0, 1, 2):
        raise ctx.error(f"qk_matmul_output_mode must be 0 to 3, got {mode}")
    probs = F.cast(probs, q.dtype)
    y = F.matmul(probs, v)
    if q3.ndim == 3:
        b, h, s, e = y.shape
        y = F.reshape(y.transpose(1, 2), [b, s, h * e])
    return y, present_k, present_v, F.cast(qk_out, q.dtype)


@translates("RotaryEmbedding", attrs={"interleaved", "rotary_embedding_dim", "num_heads"})
def rotary_embedding(ctx: NodeContext) -> Tensor:
    """Rotate the first rotary_embedding_dim features of each head by position: pairs (x1, x2), the two halves
    (or the even and odd features when interleaved), become (cos x1 - sin x2, sin x1 + cos x2)."""
    x = ctx.x(0)
    cos, sin = ctx.x(1), ctx.x(2)
    if x.ndim == 4:  # [B, H, S, D] -> [B, S, H, D]
        work = x.transpose(1, 2)
    elif x.ndim == 3:
        heads = int(ctx.attr("num_heads", 0))
        if not heads:
            raise ctx.error("a 3-D input needs num_heads")
        b, s, hidden = x.shape
        work = F.reshape(x, [b, s, heads, hidden // heads])
    else:
        raise ctx.error(f"input must be 3-D or 4-D, got shape {x.shape}")
    d = work.shape[3]
    rd = int(ctx.attr("rotary_embedding_dim", 0)) or d
    if ctx.has(3):  # the caches are tables indexed by position
        ids = ctx.x(3)
        cos, sin = cos[ids], sin[ids]
    cos, sin = F.unsqueeze(cos, 2), F.unsqueeze(sin, 2)  # [B, S, 1, rd / 2]
    turned = work[..., :rd]
    if ctx.attr("interleaved", 0):
        x1, x2 = turned[..., 0::2], turned[..., 1::2]
    else:
        x1, x2 = turned[..., : rd // 2], turned[..., rd // 2 :]
    real = F.sub(F.mul(cos, x1), F.mul(sin, x2))
    imag = F.add(F.mul(sin, x1), F.mul(cos, x2))
    if ctx.attr("interleaved", 0):
        turned = F.reshape(F.stack([real, imag], -1), turned.shape)
    else:
        turned = F.cat([real, imag], -1)
    out = F.cat([turned, work[..., rd:]], -1) if rd < d else turned
    return out.transpose(1, 2) if x.ndim == 4 else F.reshape(out, x.shape)


def _split_heads(x: Tensor, heads: int) -> Tensor:
    b, t, hidden = x.shape
    return F.reshape(x, [b, t, heads, hidden // heads]).transpose(1, 2)  # [B, H, T, D]


@translates(
    "LinearAttention", attrs={"chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"}
)  # fmt: skip
def linear_attention(ctx: NodeContext) -> tuple[Tensor, Tensor]:
    """Recurrent linear attention, unrolled over time in float32: a state S [B, H, dk, dv] decays by exp(g_t)
    (gated rules), corrects v_t by beta_t (v_t - S^T k_t) (delta rules), gains k_t v_t^T, and is read by
    scale q_t^T S. chunk_size only tunes kernels and changes nothing here."""
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ctx.error(f"update_rule must be linear, gated, delta or gated_delta, got {rule!r}")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    hq, hk = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
    query = ctx.x(0)
    out_dtype = query.dtype
    q, k, v = (F.cast(_split_heads(ctx.x(i), h), dt.float32) for i, h in ((0, hq), (1, hk), (2, hk)))
    b, _, steps, dk = q.shape
    dv = v.shape[3]
    if not isinstance(steps, int):
        raise ctx.unsupported(f"a symbolic sequence length ({steps}) is not supported (the loop is unrolled)")
    decay = beta = None
    if gated:
        g = ctx.x(4)
        decay = F.cast(F.reshape(g, [b, steps, hk, 1]).transpose(1, 2) if g.shape[-1] == hk else _split_heads(g, hk),
                       dt.float32)  # fmt: skip
    if delta:
        bt = ctx.x(5)
        beta = F.cast(F.reshape(bt, [b, steps, bt.shape[-1], 1]).transpose(1, 2), dt.float32)
    state_dtype = ctx.x(3).dtype if ctx.has(3) else out_dtype
    state = F.cast(ctx.x(3), dt.float32) if ctx.has(3) else F.zeros_like(k[:, :, :1, :1]).expand(b, hk, dk, dv)
    scale = ctx.attr("scale", 0.0) or 1 / math.sqrt(dk)
    outs = []
    for t in range(steps):
        k_t, v_t = k[:, :, t, :], v[:, :, t, :]
        if gated:
            state = F.mul(state, F.unsqueeze(F.exp(decay[:, :, t, :]), -1))
        if delta:
            retrieved = F.sum(F.mul(state, F.unsqueeze(k_t, -1)), -2)  # S^T k: [B, H, dv]
            v_t = F.mul(beta[:, :, t, :], F.sub(v_t, retrieved))
        state = F.add(state, F.mul(F.unsqueeze(k_t, -1), F.unsqueeze(v_t, -2)))
        read = F.repeat_interleave(state, hq // hk, 1) if hq != hk else state
        outs.append(F.mul(F.sum(F.mul(F.unsqueeze(q[:, :, t, :], -1), read), -2), scale))
    y = F.stack(outs, 2).transpose(1, 2)  # [B, T, Hq, dv]
    return F.cast(F.reshape(y, [b, steps, hq * dv]), out_dtype), F.cast(state, state_dtype)


@translates("ai.onnx.preview.FlexAttention", attrs={"scale", "score_mod", "prob_mod", "softmax_precision"})
def flex_attention(ctx: NodeContext) -> Tensor:
    """softmax(score_mod(sqrt(s) Q (sqrt(s) K)^T)) then prob_mod, times V: the two mods are subgraphs called on
    the scores and the probabilities. Half-precision inputs compute the softmax in float32 unless
    softmax_precision says otherwise."""
    q, k, v = (ctx.x(i) for i in range(3))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or not q.dtype.is_float:
        raise ctx.error(f"Q, K and V must be 4-D floating-point, got {q.shape}, {k.shape}, {v.shape}")
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:
        k, v = F.repeat_interleave(k, hq // hk, 1), F.repeat_interleave(v, hq // hk, 1)
    root = math.sqrt(ctx.attr("scale", 1 / math.sqrt(q.shape[3])))
    scores = F.matmul(F.mul(q, root), F.mul(k, root).transpose(2, 3))
    if "softmax_precision" in ctx.attrs:
        compute = types.to_luminal(int(ctx.attr("softmax_precision")), "FlexAttention softmax_precision")
    else:
        compute = dt.float32 if q.dtype in (dt.float16, dt.bfloat16) else q.dtype
    scores = F.cast(scores, compute)
    if "score_mod" in ctx.attrs:
        scores = F.cast(ctx.subgraph("score_mod", [scores])[0], compute)
    e = F.exp(F.sub(scores, F.amax(scores, -1, keepdim=True)))
    probs = F.div(e, F.sum(e, -1, keepdim=True))
    if "prob_mod" in ctx.attrs:
        probs = F.cast(ctx.subgraph("prob_mod", [probs])[0], compute)
    return F.cast(F.matmul(probs, F.cast(v, compute)), v.dtype)
