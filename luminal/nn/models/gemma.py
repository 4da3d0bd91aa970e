"""Gemma 2 (Gemma2ForCausalLM) and Gemma 3's text model (Gemma3ForCausalLM): Llama-like decoders whose
embeddings are scaled by sqrt(hidden_size), whose layers alternate sliding-window and global attention (Gemma 3
with a rope per kind), and whose logits may be soft-capped. Module paths are the checkpoint's:
model.embed_tokens, model.layers.0.self_attn.q_proj, model.layers.0.pre_feedforward_layernorm, ..., model.norm,
lm_head (absent when tied, as Gemma's are by default). The config is read in gemma_config.py, the blocks are in
gemma_layers.py; the call is LlamaForCausalLM's, so generation, paged decoding and packaging serve it alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal import functional as F
from luminal.nn.grouped_attention import KVCache
from luminal.nn.linear import Embedding, Linear
from luminal.nn.models.decoding import WindowMasks, past_length, step_positions
from luminal.nn.models.gemma_config import GemmaConfig, Rope
from luminal.nn.models.gemma_layers import GemmaDecoderLayer, GemmaRMSNorm
from luminal.nn.module import Module, ModuleList
from luminal.nn.quantized import quantize_modules
from luminal.nn.rotary import RotaryEmbedding
from luminal.tensor import Tensor


class GemmaModel(Module):
    """input_ids [batch, seq] -> (final-normed hidden state, per-layer KV caches); see GemmaForCausalLM."""

    def __init__(self, cfg: GemmaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, cfg.dtype)
        qk_norm = cfg.model_type == "gemma3_text"
        self.layers = ModuleList([GemmaDecoderLayer(cfg, qk_norm) for _ in range(cfg.num_hidden_layers)])
        self.norm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg.dtype)
        # transformers multiplies by torch.tensor(sqrt(hidden_size)) (float32) rounded to the weights' dtype.
        self.normalizer = float(np.float32(cfg.hidden_size**0.5).astype(cfg.dtype.np))

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        past: list[KVCache] | None = None,
        position_ids: Tensor | None = None,
        key_positions: Tensor | None = None,
    ) -> tuple[Tensor, list[KVCache]]:
        cfg = self.config
        start = past_length(past)
        positions = step_positions(input_ids, start) if position_ids is None else position_ids
        rotaries: dict[Rope, tuple[Tensor, Tensor]] = {}  # per layer kind, shared by the layers of that kind
        masks = WindowMasks(input_ids, start, attention_mask, positions, key_positions)
        x, caches = self.embed_tokens(input_ids) * self.normalizer, []
        for k, layer in enumerate(self.layers):
            rope, window = cfg.rope_of(k), cfg.windows[k]
            if rope not in rotaries:
                rotaries[rope] = RotaryEmbedding(cfg.head_dim, rope.theta, rope.scaling)(positions, cfg.dtype)
            x, cache = layer(x, rotaries[rope], masks(window), past[k] if past else None)
            caches.append(cache)
        return self.norm(x), caches


class GemmaForCausalLM(Module):
    """input_ids [batch, seq] -> (logits [batch, seq, vocab], per-layer (keys, values) [batch, kv_heads, past +
    seq, head_dim]); the arguments are LlamaForCausalLM's (past caches, attention_mask over past + seq,
    position_ids, key_positions for the windows of a paged cache). quantize="int8": the projections (and an
    untied head) hold Q8_0 weights; embeddings and norms stay float."""

    def __init__(self, config: Any, quantize: str | None = None) -> None:
        super().__init__()
        self.config = cfg = config if isinstance(config, GemmaConfig) else GemmaConfig.from_hf(config)
        self.model = GemmaModel(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False, dtype=cfg.dtype)
        quantize_modules(self, quantize)

    def forward(self, input_ids: Tensor, *step: Any) -> tuple[Tensor, list[KVCache]]:
        """step: GemmaModel.forward's attention_mask, past, position_ids, key_positions (any prefix of them)."""
        hidden, caches = self.model(input_ids, *step)
        tied = self.config.tie_word_embeddings
        logits = self.model.embed_tokens.attend(hidden) if tied else self.lm_head(hidden)
        cap = self.config.final_logit_softcapping
        if cap is not None:  # cap * tanh(logits / cap): every logit within (-cap, cap)
            logits = F.soft_cap(logits, cap)
        return logits, caches
