"""GPT-2 (Hugging Face's GPT2Model / GPT2LMHeadModel): pre-norm decoder with learned positions, a tied output
head and an optional KV cache. Module paths are the checkpoint's: wte, wpe, h.0.attn.c_attn, ..., ln_f, and
under `transformer.` in GPT2LMHeadModel.

GPT-2's projections are Hugging Face "Conv1D" layers: a linear layer whose weight is stored [in, out]
(transposed from torch.nn.Linear), kept here as it is stored so the checkpoint binds unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from luminal import functional as F
from luminal.nn.activation import activation_fn
from luminal.nn.attention import merge_heads, split_heads
from luminal.nn.grouped_attention import KVCache
from luminal.nn.linear import Embedding, input_of, is_quantized, weight_of
from luminal.nn.models.config import load_config, pick
from luminal.nn.models.decoding import past_length, step_mask
from luminal.nn.module import Module, ModuleList
from luminal.nn.normalization import LayerNorm
from luminal.nn.quantized import quantize_modules
from luminal.tensor import Tensor


@dataclass(frozen=True)
class GPT2Config:
    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None  # None: 4 * n_embd
    activation_function: str = "gelu_new"
    layer_norm_epsilon: float = 1e-5
    scale_attn_weights: bool = True  # scores / sqrt(head_dim)
    scale_attn_by_inverse_layer_idx: bool = False  # scores / (layer index + 1) as well

    @classmethod
    def from_hf(cls, config: Any) -> GPT2Config:
        return pick(cls, load_config(config))

    @property
    def inner(self) -> int:
        return 4 * self.n_embd if self.n_inner is None else self.n_inner


class Conv1D(Module):
    """y = x @ weight + bias with weight [in, out]: Hugging Face's GPT-2 projection layer."""

    def __init__(self, out_features: int, in_features: int) -> None:  # Hugging Face's argument order (nf, nx)
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.declare("weight", (in_features, out_features))
        self.declare("bias", (out_features,))

    def forward(self, x: Tensor) -> Tensor:
        if is_quantized(self):  # stored [out, in] once quantised (blocks run along the contraction)
            return F.linear(input_of(self, x), weight_of(self, x.graph), self.param(x.graph, "bias"))
        return x @ self.param(x.graph, "weight") + self.param(x.graph, "bias")


class GPT2Attention(Module):
    def __init__(self, cfg: GPT2Config, layer_idx: int) -> None:
        super().__init__()
        self.heads, self.dim = cfg.n_head, cfg.n_embd
        head_dim = cfg.n_embd // cfg.n_head
        scale = 1 / math.sqrt(head_dim) if cfg.scale_attn_weights else 1.0
        self.scale = scale / (layer_idx + 1) if cfg.scale_attn_by_inverse_layer_idx else scale
        self.c_attn = Conv1D(3 * cfg.n_embd, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd)

    def forward(self, x: Tensor, mask: Tensor, past: KVCache | None) -> tuple[Tensor, KVCache]:
        q, k, v = (split_heads(t, self.heads) for t in F.split(self.c_attn(x), self.dim, dim=-1))
        if past is not None:
            k, v = F.cat([past[0], k], dim=2), F.cat([past[1], v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        return self.c_proj(merge_heads(out)), (k, v)


class GPT2MLP(Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.c_fc = Conv1D(cfg.inner, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.inner)
        self.act = activation_fn(cfg.activation_function)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2Block(Module):
    def __init__(self, cfg: GPT2Config, layer_idx: int) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, cfg.layer_norm_epsilon)
        self.attn = GPT2Attention(cfg, layer_idx)
        self.ln_2 = LayerNorm(cfg.n_embd, cfg.layer_norm_epsilon)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x: Tensor, mask: Tensor, past: KVCache | None) -> tuple[Tensor, KVCache]:
        attended, cache = self.attn(self.ln_1(x), mask, past)
        x = x + attended
        return x + self.mlp(self.ln_2(x)), cache


class GPT2Model(Module):
    """input_ids [batch, seq] -> (last hidden state [batch, seq, n_embd], per-layer KV caches).

    past: per layer (keys, values) [batch, heads, past, head_dim] of the earlier positions; attention_mask
    [batch, past + seq] (1 = token). position_ids [batch, seq] default to past, past + 1, ... (left-padded
    rows pass their own, counted from their first token).
    """

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = cfg = config if isinstance(config, GPT2Config) else GPT2Config.from_hf(config)
        self.wte = Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = Embedding(cfg.n_positions, cfg.n_embd)
        self.h = ModuleList([GPT2Block(cfg, k) for k in range(cfg.n_layer)])
        self.ln_f = LayerNorm(cfg.n_embd, cfg.layer_norm_epsilon)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        past: list[KVCache] | None = None,
        position_ids: Tensor | None = None,
    ) -> tuple[Tensor, list[KVCache]]:
        start, seq = past_length(past), input_ids.shape[1]
        if position_ids is None:  # rows start, start + 1, ... of the table: a view, no gather
            positions = self.wpe.param(input_ids.graph, "weight").narrow(0, start, seq)
        else:
            positions = self.wpe(position_ids)
        x = self.wte(input_ids) + positions
        mask = step_mask(input_ids, start, attention_mask)
        caches = []
        for k, block in enumerate(self.h):
            x, cache = block(x, mask, past[k] if past else None)
            caches.append(cache)
        return self.ln_f(x), caches


class GPT2LMHeadModel(Module):
    """GPT2Model under `transformer.`, logits from the tied word embedding (no lm_head.weight is read).
    quantize="int8": the attention and MLP projections hold Q8_0 weights (the tied head stays float32)."""

    def __init__(self, config: Any, quantize: str | None = None) -> None:
        super().__init__()
        self.transformer = GPT2Model(config)
        self.config = self.transformer.config
        quantize_modules(self, quantize)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        past: list[KVCache] | None = None,
        position_ids: Tensor | None = None,
    ) -> tuple[Tensor, list[KVCache]]:
        hidden, caches = self.transformer(input_ids, attention_mask, past, position_ids)
        return self.transformer.wte.attend(hidden), caches
