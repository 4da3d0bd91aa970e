"""Grouped-query self-attention with Llama's parameter names (q_proj, k_proj, v_proj, o_proj), rotary
positions, an optional KV cache, and Qwen3's optional RMSNorm over each head's queries and keys (q_norm,
k_norm, weights [head_dim]), applied after the projections and before the rotation. With fused_qkv (Phi-3) one
projection, qkv_proj [(heads + 2 kv_heads) * head_dim, hidden], holds the queries', keys' and values' rows in
that order: one GEMM, whose output the graph slices into the three.

num_kv_heads divides num_heads; query head h reads kv head h // (num_heads / num_kv_heads) (multi-query
when num_kv_heads == 1, plain multi-head when equal). With a cache, the keys and values of earlier positions
come in as [batch, kv_heads, past, head_dim] tensors (past may be a symbol), the new ones are appended, and
the grown cache is returned so a decode-step graph can output it for the next step.
"""

from __future__ import annotations

from typing import Any

from luminal import dtypes as dt
from luminal import functional as F
from luminal.nn.attention import merge_heads, split_heads
from luminal.nn.linear import Linear
from luminal.nn.module import Module
from luminal.nn.normalization import RMSNorm
from luminal.nn.rotary import apply_rotary
from luminal.tensor import Tensor

KVCache = tuple[Tensor, Tensor]  # (keys, values), each [batch, kv_heads, seq, head_dim]


class GroupedQueryAttention(Module):
    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        qkv_bias: bool = False,
        out_bias: bool = False,
        dtype: Any = dt.float32,
        qk_norm_eps: float | None = None,  # None: no q/k norm (Llama); Qwen3 passes its rms_norm_eps
        fused_qkv: bool = False,  # Phi-3: q, k and v projected by one weight, qkv_proj
    ) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads % num_kv_heads:
            raise ValueError(f"GroupedQueryAttention: {num_kv_heads} kv heads must divide {num_heads} heads")
        head_dim = hidden_size // num_heads if head_dim is None else head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.fused_qkv = fused_qkv
        if fused_qkv:
            self.qkv_proj = Linear(hidden_size, (num_heads + 2 * num_kv_heads) * head_dim, qkv_bias, dtype)
        else:
            self.q_proj = Linear(hidden_size, num_heads * head_dim, qkv_bias, dtype)
            self.k_proj = Linear(hidden_size, num_kv_heads * head_dim, qkv_bias, dtype)
            self.v_proj = Linear(hidden_size, num_kv_heads * head_dim, qkv_bias, dtype)
        self.o_proj = Linear(num_heads * head_dim, hidden_size, out_bias, dtype)
        self.q_norm = self.k_norm = None
        if qk_norm_eps is not None:  # declared only when used: models without it keep their graphs unchanged
            self.q_norm = RMSNorm(head_dim, qk_norm_eps, dtype=dtype)
            self.k_norm = RMSNorm(head_dim, qk_norm_eps, dtype=dtype)

    def forward(
        self,
        x: Tensor,
        rotary: tuple[Tensor, Tensor] | None = None,
        mask: Tensor | None = None,
        past: KVCache | None = None,
    ) -> tuple[Tensor, KVCache]:
        """x [batch, seq, hidden] -> (out [batch, seq, hidden], (keys, values) including this step's).

        rotary: (cos, sin) for the new positions; mask: bool, True where allowed, broadcast against
        [batch, heads, seq, past + seq] (build it with `causal_mask` and `padding_mask`).
        """
        q, k, v = self._project(x)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        if past is not None:
            k, v = F.cat([past[0], k], dim=2), F.cat([past[1], v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return self.o_proj(merge_heads(out)), (k, v)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries [batch, heads, seq, head_dim], keys and values [batch, kv_heads, seq, head_dim]."""
        if not self.fused_qkv:
            q = split_heads(self.q_proj(x), self.num_heads)
            return q, split_heads(self.k_proj(x), self.num_kv_heads), split_heads(self.v_proj(x), self.num_kv_heads)
        qkv = self.qkv_proj(x)
        q_end = self.num_heads * self.head_dim
        k_end = q_end + self.num_kv_heads * self.head_dim
        q, k, v = qkv[..., :q_end], qkv[..., q_end:k_end], qkv[..., k_end:]
        return split_heads(q, self.num_heads), split_heads(k, self.num_kv_heads), split_heads(v, self.num_kv_heads)

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, kv_heads={self.num_kv_heads}, head_dim={self.head_dim}"
