"""Gemma's blocks, with Hugging Face's parameter names: the (1 + weight) RMSNorm, grouped-query attention scaled by
query_pre_attn_scalar with optional soft-capping and per-head q/k norms, and the decoder layer that norms both
sides of its attention and of its GeGLU MLP."""

from __future__ import annotations

from typing import Any

from luminal import dtypes as dt
from luminal import functional as F
from luminal.hl import prim
from luminal.nn.attention import merge_heads, split_heads
from luminal.nn.grouped_attention import GroupedQueryAttention, KVCache
from luminal.nn.mlp import SwiGLU
from luminal.nn.models.gemma_config import GemmaConfig
from luminal.nn.module import Module
from luminal.nn.rotary import apply_rotary
from luminal.tensor import Tensor


class GemmaRMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * (1 + weight), all in float32 and rounded once to x's dtype (Gemma stores the
    offset from 1, so a zero weight is the identity scale)."""

    def __init__(self, dim: int, eps: float = 1e-6, dtype: Any = dt.float32) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.declare("weight", (dim,), dtype)

    def forward(self, x: Tensor) -> Tensor:
        scale = prim.cast(self.param(x.graph, "weight"), dt.float32) + 1.0
        return F.rms_norm(x, self.dim, scale, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class GemmaAttention(GroupedQueryAttention):
    """Llama's attention (same projections, rotary, cache) with Gemma's scale query_pre_attn_scalar^-0.5,
    Gemma 2's attention logit soft-capping, and, with `qk_norm` (Gemma 3), q_norm / k_norm over each head
    before the rotation."""

    def __init__(self, cfg: GemmaConfig, qk_norm: bool) -> None:
        super().__init__(
            cfg.hidden_size,
            cfg.num_attention_heads,
            num_kv_heads=cfg.kv_heads,
            head_dim=cfg.head_dim,
            qkv_bias=cfg.attention_bias,
            out_bias=cfg.attention_bias,
            dtype=cfg.dtype,
        )
        self.scale, self.softcap, self.qk_norm = cfg.query_pre_attn_scalar**-0.5, cfg.attn_logit_softcapping, qk_norm
        if qk_norm:
            self.q_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps, cfg.dtype)
            self.k_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps, cfg.dtype)

    def forward(
        self,
        x: Tensor,
        rotary: tuple[Tensor, Tensor] | None = None,
        mask: Tensor | None = None,
        past: KVCache | None = None,
    ) -> tuple[Tensor, KVCache]:
        heads = ((self.q_proj, self.num_heads), (self.k_proj, self.num_kv_heads), (self.v_proj, self.num_kv_heads))
        q, k, v = (split_heads(project(x), n) for project, n in heads)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        if past is not None:
            k, v = F.cat([past[0], k], dim=2), F.cat([past[1], v], dim=2)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=True, softcap=self.softcap
        )
        return self.o_proj(merge_heads(out)), (k, v)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scale={self.scale:.4g}, softcap={self.softcap}, qk_norm={self.qk_norm}"


class GemmaDecoderLayer(Module):
    """x += post_attention_layernorm(self_attn(input_layernorm(x)));
    x += post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x))), the MLP gated by hidden_activation."""

    def __init__(self, cfg: GemmaConfig, qk_norm: bool) -> None:
        super().__init__()
        size, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = GemmaRMSNorm(size, eps, cfg.dtype)
        self.self_attn = GemmaAttention(cfg, qk_norm)
        self.post_attention_layernorm = GemmaRMSNorm(size, eps, cfg.dtype)
        self.pre_feedforward_layernorm = GemmaRMSNorm(size, eps, cfg.dtype)
        self.mlp = SwiGLU(size, cfg.intermediate_size, False, cfg.hidden_activation, cfg.dtype)
        self.post_feedforward_layernorm = GemmaRMSNorm(size, eps, cfg.dtype)

    def forward(self, x: Tensor, *attend: Any) -> tuple[Tensor, KVCache]:
        """attend: GemmaAttention.forward's rotary, mask and past."""
        attended, cache = self.self_attn(self.input_layernorm(x), *attend)
        x = x + self.post_attention_layernorm(attended)
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x))), cache
