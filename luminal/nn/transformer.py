"""Transformer blocks: torch.nn.TransformerEncoderLayer (post- or pre-norm, torch's names) and the pre-norm
decoder block of the Llama family (RMSNorm, grouped-query attention with RoPE and a KV cache, SwiGLU,
Qwen3's per-head q/k norm, and Phi-3's fused projections)."""

from __future__ import annotations

from typing import Any

from luminal import dtypes as dt
from luminal.nn.activation import activation_fn
from luminal.nn.attention import MultiheadAttention
from luminal.nn.grouped_attention import GroupedQueryAttention, KVCache
from luminal.nn.linear import Linear
from luminal.nn.mlp import FusedSwiGLU, SwiGLU
from luminal.nn.module import Module
from luminal.nn.normalization import LayerNorm, RMSNorm
from luminal.tensor import Tensor


class TransformerEncoderLayer(Module):
    """torch.nn.TransformerEncoderLayer(batch_first=True) in inference (dropout is the identity).

    norm_first=False: x = norm1(x + attn(x)); x = norm2(x + ff(x)). norm_first=True: x = x + attn(norm1(x));
    x = x + ff(norm2(x)). Parameters: self_attn.*, linear1, linear2, norm1, norm2.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
        dtype: Any = dt.float32,
    ) -> None:
        super().__init__()
        self.norm_first, self.activation = norm_first, activation_fn(activation)
        self.self_attn = MultiheadAttention(d_model, nhead, bias, dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias, dtype)
        self.linear2 = Linear(dim_feedforward, d_model, bias, dtype)
        self.norm1 = LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype)

    def _attend(self, x: Tensor, src_mask: Tensor | None, padding: Tensor | None) -> Tensor:
        return self.self_attn(x, x, x, key_padding_mask=padding, attn_mask=src_mask)

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.activation(self.linear1(x)))

    def forward(
        self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None
    ) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._attend(self.norm1(x), src_mask, src_key_padding_mask)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._attend(x, src_mask, src_key_padding_mask))
        return self.norm2(x + self._feed_forward(x))


class DecoderLayer(Module):
    """x += self_attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x)) — Llama, Mistral, Qwen2, Qwen3,
    Phi-3, Mixtral and Qwen3-MoE (whose mlp is a mixture of experts where the layer is sparse).

    Parameter names are Hugging Face's for those models (self_attn.q_proj, mlp.gate_proj, ...; with `fused`,
    Phi-3's self_attn.qkv_proj and mlp.gate_up_proj).
    """

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        rms_norm_eps: float = 1e-6,
        qkv_bias: bool = False,
        out_bias: bool = False,
        mlp_bias: bool = False,
        act: str = "silu",
        dtype: Any = dt.float32,
        qk_norm: bool = False,  # Qwen3: self_attn.q_norm / k_norm, RMSNorms over each head's features
        fused: bool = False,  # Phi-3: q/k/v in one projection, gate/up in another
        mlp: Module | None = None,  # the feed-forward in the SwiGLU's place (a mixture of experts: luminal/nn/moe.py)
    ) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden_size, rms_norm_eps, dtype=dtype)
        self.self_attn = GroupedQueryAttention(
            hidden_size,
            num_heads,
            num_kv_heads,
            head_dim,
            qkv_bias,
            out_bias,
            dtype,
            rms_norm_eps if qk_norm else None,
            fused,
        )
        self.post_attention_layernorm = RMSNorm(hidden_size, rms_norm_eps, dtype=dtype)
        if mlp is not None:
            self.mlp = mlp
        elif fused:
            if mlp_bias:
                raise ValueError("DecoderLayer: fused gate_up_proj has no bias (Phi-3's has none)")
            self.mlp = FusedSwiGLU(hidden_size, intermediate_size, act, dtype)
        else:
            self.mlp = SwiGLU(hidden_size, intermediate_size, mlp_bias, act, dtype)

    def forward(
        self,
        x: Tensor,
        rotary: tuple[Tensor, Tensor] | None = None,
        mask: Tensor | None = None,
        past: KVCache | None = None,
    ) -> tuple[Tensor, KVCache]:
        attended, cache = self.self_attn(self.input_layernorm(x), rotary, mask, past)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), cache
