"""Plain PyTorch Llama and BERT (no transformers), the anchors of bench/gpu.py, loaded from the same Hugging
Face-named weights as the luminal builders.

They compute what Hugging Face's LlamaForCausalLM and BertModel compute in bf16 (RMSNorm in float32, rotary
tables in float32 rounded to the model's dtype, attention through scaled_dot_product_attention), written with
static shapes so torch.compile(mode="reduce-overhead") can capture them as CUDA graphs. Weights are module
parameters: CUDA-graph trees treat those as static and never copy them into the graph's input buffers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _param(weights: dict, name: str) -> nn.Parameter:
    return nn.Parameter(weights[name], requires_grad=False)


class _Linear(nn.Module):
    def __init__(self, weights: dict, prefix: str) -> None:
        super().__init__()
        self.weight = _param(weights, f"{prefix}.weight")
        self.bias = _param(weights, f"{prefix}.bias") if f"{prefix}.bias" in weights else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _DecoderLayer(nn.Module):
    def __init__(self, cfg, weights: dict, prefix: str) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_norm = _param(weights, f"{prefix}.input_layernorm.weight")
        self.post_norm = _param(weights, f"{prefix}.post_attention_layernorm.weight")
        attn, mlp = f"{prefix}.self_attn", f"{prefix}.mlp"
        self.q, self.k, self.v, self.o = (_Linear(weights, f"{attn}.{p}_proj") for p in "qkvo")
        self.gate, self.up, self.down = (_Linear(weights, f"{mlp}.{p}_proj") for p in ("gate", "up", "down"))

    def forward(self, x, cos, sin, past):
        cfg, (b, s, _) = self.cfg, x.shape
        h = _rms_norm(x, self.input_norm, cfg.rms_norm_eps)
        q = self.q(h).view(b, s, cfg.num_attention_heads, cfg.head_size).transpose(1, 2)
        k = self.k(h).view(b, s, cfg.kv_heads, cfg.head_size).transpose(1, 2)
        v = self.v(h).view(b, s, cfg.kv_heads, cfg.head_size).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
        # One new token sees every cached key; a prompt is causal.
        out = F.scaled_dot_product_attention(q, k, v, is_causal=past is None, enable_gqa=True)
        x = x + self.o(out.transpose(1, 2).reshape(b, s, -1))
        h = _rms_norm(x, self.post_norm, cfg.rms_norm_eps)
        return x + self.down(F.silu(self.gate(h)) * self.up(h)), (k, v)


class TorchLlama(nn.Module):
    """(input_ids [b, s], past [(k, v)] or None) -> (logits of the last position [b, vocab], present caches),
    the outputs of luminal's prefill and decode-step graphs (luminal.nn.models.generation)."""

    def __init__(self, cfg, weights: dict) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = _param(weights, "model.embed_tokens.weight")
        self.layers = nn.ModuleList(
            _DecoderLayer(cfg, weights, f"model.layers.{k}") for k in range(cfg.num_hidden_layers)
        )
        self.norm = _param(weights, "model.norm.weight")
        self.head = self.embed if cfg.tie_word_embeddings else _param(weights, "lm_head.weight")
        dim = cfg.head_size
        inv_freq = cfg.rope_theta ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=self.embed.device) / dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, input_ids: torch.Tensor, past: list | None = None):
        start = 0 if past is None else past[0][0].shape[2]
        positions = torch.arange(start, start + input_ids.shape[1], device=input_ids.device, dtype=torch.float32)
        angles = positions[:, None] * self.inv_freq[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(self.embed.dtype), emb.sin().to(self.embed.dtype)
        x, presents = F.embedding(input_ids, self.embed), []
        for k, layer in enumerate(self.layers):
            x, cache = layer(x, cos, sin, None if past is None else past[k])
            presents.append(cache)
        x = _rms_norm(x[:, -1], self.norm, self.cfg.rms_norm_eps)  # only the next token's logits leave
        return F.linear(x, self.head), presents


class _BertLayer(nn.Module):
    def __init__(self, cfg, weights: dict, prefix: str) -> None:
        super().__init__()
        self.heads, self.eps = cfg.num_attention_heads, cfg.layer_norm_eps
        att = f"{prefix}.attention"
        self.q, self.k, self.v = (_Linear(weights, f"{att}.self.{p}") for p in ("query", "key", "value"))
        self.att_out = _Linear(weights, f"{att}.output.dense")
        self.att_norm = _Linear(weights, f"{att}.output.LayerNorm")
        self.inter = _Linear(weights, f"{prefix}.intermediate.dense")
        self.out = _Linear(weights, f"{prefix}.output.dense")
        self.out_norm = _Linear(weights, f"{prefix}.output.LayerNorm")

    def _norm(self, x, norm: _Linear):
        return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, self.eps)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = (p(x).view(b, s, self.heads, d // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, s, d)
        x = self._norm(x + self.att_out(att), self.att_norm)
        return self._norm(x + self.out(F.gelu(self.inter(x))), self.out_norm)


class TorchBert(nn.Module):
    """(input_ids, attention_mask [b, s]) -> last hidden state, as luminal's bert_graph (token types all 0)."""

    def __init__(self, cfg, weights: dict) -> None:
        super().__init__()
        self.eps = cfg.layer_norm_eps
        emb = "embeddings"
        self.words = _param(weights, f"{emb}.word_embeddings.weight")
        self.positions = _param(weights, f"{emb}.position_embeddings.weight")
        self.types = _param(weights, f"{emb}.token_type_embeddings.weight")
        self.norm = _Linear(weights, f"{emb}.LayerNorm")
        self.layers = nn.ModuleList(
            _BertLayer(cfg, weights, f"encoder.layer.{k}") for k in range(cfg.num_hidden_layers)
        )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        s = input_ids.shape[1]
        x = F.embedding(input_ids, self.words) + self.positions[:s] + self.types[0]
        x = F.layer_norm(x, x.shape[-1:], self.norm.weight, self.norm.bias, self.eps)
        mask = attention_mask.bool()[:, None, None, :]  # keys only, as Hugging Face masks padding
        for layer in self.layers:
            x = layer(x, mask)
        return x
