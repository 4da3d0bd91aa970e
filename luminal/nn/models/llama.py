"""Llama-family decoders (Hugging Face's LlamaForCausalLM, and Mistral / Qwen2 / Qwen3 / Phi-3 configs, which differ
only in data; Qwen3 adds an RMSNorm over each head's queries and keys, self_attn.q_norm / k_norm; Phi-3 fuses
the projections, self_attn.qkv_proj and mlp.gate_up_proj, and may rotate part of each head: phi3.py; Mixtral and
Qwen3-MoE replace the SwiGLU of some or all layers by a sparse mixture of experts, luminal/nn/moe.py): RMSNorm
pre-norm blocks, grouped-query attention with rotary positions, SwiGLU, an optional tied head, and a KV cache.
Module paths are the checkpoint's: model.embed_tokens, model.layers.0.self_attn.q_proj, ..., model.norm, lm_head.

What the config decides: kv heads (GQA), head_dim, rope theta and rope scaling (linear, dynamic, llama3 as
Llama 3.1+ has, yarn, longrope as Phi-3 has; luminal/nn/rope_scaling.py), rms eps, tied embeddings, biases
(Llama's attention_bias on all four projections, Qwen2's on q/k/v only), and sliding-window layers (Mistral's,
Phi-3's, Mixtral's and Qwen3-MoE's window on every layer, Qwen2's on the layers its layer_types name).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from luminal import dtypes as dt
from luminal.nn.grouped_attention import KVCache
from luminal.nn.linear import Embedding, Linear
from luminal.nn.models.config import load_config, pick
from luminal.nn.models.decoding import WindowMasks, past_length, step_positions
from luminal.nn.models.moe_config import MoeConfig
from luminal.nn.models.phi3 import phi3_as_llama
from luminal.nn.module import Module, ModuleList
from luminal.nn.moe import SparseMoeBlock
from luminal.nn.normalization import RMSNorm
from luminal.nn.quantized import quantize_modules
from luminal.nn.rope_scaling import RopeScaling
from luminal.nn.rotary import RotaryEmbedding
from luminal.nn.transformer import DecoderLayer
from luminal.tensor import Tensor

KINDS = ("llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen3_moe")  # the model_types built here


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None  # None: as many as query heads (no grouping)
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope: RopeScaling = RopeScaling()  # how positions stretch past the trained context (default: not at all)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: queries and keys are RMS-normed per head before the rotation
    fused_projections: bool = False  # Phi-3: q/k/v in one weight (qkv_proj), gate/up in another (gate_up_proj)
    partial_rotary_factor: float = 1.0  # Phi-3: the share of each head's features rotated (the first ones)
    # Per layer, the sliding window (keys a query may see, itself included) or None for full attention.
    windows: tuple[int | None, ...] = field(default=())
    moe: MoeConfig | None = None  # Mixtral, Qwen3-MoE: the layers whose feed-forward is a mixture of experts
    # Parameters' and activations' dtype (torch's model.to(torch.bfloat16)). from_hf keeps float32: loading
    # widens half checkpoints to float32 (checkpoint.widen_to_float32), whatever the config's torch_dtype says.
    dtype: dt.DType = dt.float32

    @classmethod
    def from_hf(cls, config: Any) -> LlamaConfig:
        raw = load_config(config)
        kind = raw.get("model_type", "llama")
        if kind not in KINDS:
            raise NotImplementedError(f"Llama family: model_type {kind!r} is not built ({', '.join(KINDS)})")
        if kind == "phi3":
            raw = phi3_as_llama(raw)
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}  # transformers 5 / 4 spellings
        theta = rope.get("rope_theta", raw.get("rope_theta", 10000.0))
        layers = raw.get("num_hidden_layers", 32)
        if kind == "qwen2":  # q/k/v carry biases, o_proj does not
            biases = dict(qkv_bias=True, out_bias=False)
        else:
            biases = dict(qkv_bias=bool(raw.get("attention_bias")), out_bias=bool(raw.get("attention_bias")))
        if kind == "qwen3":  # the q/k norms; a config without head_dim means Qwen3Config's 128, not hidden / heads
            raw = {"head_dim": 128, **raw, "qk_norm": True}
        if kind == "qwen3_moe":  # the same norms; its head_dim defaults to hidden / heads
            raw = {**raw, "qk_norm": True}
        moe = MoeConfig.from_hf(kind, raw, layers)
        windows = _windows(kind, raw, layers)
        scaling = RopeScaling.from_hf(raw)
        phi3 = dict(fused_projections=kind == "phi3", partial_rotary_factor=_partial_rotary_factor(kind, rope))
        return pick(
            cls,
            raw,
            rope_theta=float(theta),
            rope=scaling,
            windows=windows,
            dtype=dt.float32,
            moe=moe,
            **biases,
            **phi3,
        )

    @property
    def kv_heads(self) -> int:
        return self.num_attention_heads if self.num_key_value_heads is None else self.num_key_value_heads

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads if self.head_dim is None else self.head_dim

    @property
    def rotary_size(self) -> int:
        """The features of each head that are rotated, the first ones (transformers' int(head_dim * factor))."""
        return int(self.head_size * self.partial_rotary_factor)


def _partial_rotary_factor(kind: str, rope: dict) -> float:
    """Phi-3's share of each head that is rotated. The other kinds rotate whole heads: with a scaled rope a
    factor below 1 is refused (its frequencies would be those of a shorter dim), a default rope ignores it."""
    value = rope.get("partial_rotary_factor")
    factor = 1.0 if value is None else value
    if kind == "phi3":
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
            raise ValueError(f"phi3: partial_rotary_factor must be a number in (0, 1]; got {value!r}")
        return float(factor)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default" and float(factor) != 1.0:
        raise ValueError(f"rope_type {rope_type!r}: partial_rotary_factor {value!r} is not built")
    return 1.0


def _windows(kind: str, raw: dict, layers: int) -> tuple[int | None, ...]:
    window = raw.get("sliding_window")
    if kind == "llama" or window is None:
        return (None,) * layers
    if kind in ("mistral", "phi3", "mixtral"):
        return (window,) * layers
    if not raw.get("use_sliding_window", False):  # the Qwens ignore the window unless this is set
        return (None,) * layers
    if kind == "qwen3_moe":  # no layer_types: every layer slides
        return (window,) * layers
    types = raw.get("layer_types") or [  # Qwen2's and Qwen3's default: the layers from max_window_layers on slide
        "sliding_attention" if k >= raw.get("max_window_layers", 28) else "full_attention" for k in range(layers)
    ]
    return tuple(window if t == "sliding_attention" else None for t in types)


def _sparse_mlp(cfg: LlamaConfig, layer: int) -> SparseMoeBlock | None:
    """The layer's mixture of experts, or None where the layer keeps the dense SwiGLU."""
    moe = cfg.moe
    if moe is None or layer not in moe.sparse_layers:
        return None
    return SparseMoeBlock(
        cfg.hidden_size, moe.intermediate_size, moe.experts, moe.top_k, moe.renormalize, cfg.hidden_act, cfg.dtype
    )


class LlamaModel(Module):
    """input_ids [batch, seq] -> (final-normed hidden state, per-layer KV caches); see LlamaForCausalLM."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, cfg.dtype)
        self.layers = ModuleList(
            [
                DecoderLayer(
                    cfg.hidden_size,
                    cfg.intermediate_size,
                    cfg.num_attention_heads,
                    cfg.kv_heads,
                    cfg.head_size,
                    cfg.rms_norm_eps,
                    cfg.qkv_bias,
                    cfg.out_bias,
                    cfg.mlp_bias,
                    cfg.hidden_act,
                    cfg.dtype,
                    cfg.qk_norm,
                    cfg.fused_projections,
                    _sparse_mlp(cfg, k),
                )
                for k in range(cfg.num_hidden_layers)
            ]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=cfg.dtype)
        self.rotary = RotaryEmbedding(cfg.rotary_size, cfg.rope_theta, cfg.rope)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        past: list[KVCache] | None = None,
        position_ids: Tensor | None = None,
        key_positions: Tensor | None = None,
    ) -> tuple[Tensor, list[KVCache]]:
        start = past_length(past)
        positions = step_positions(input_ids, start) if position_ids is None else position_ids
        rotary = self.rotary(positions, self.config.dtype)  # cos/sin in float32, rounded as Hugging Face does
        masks = WindowMasks(input_ids, start, attention_mask, positions, key_positions)
        x, caches = self.embed_tokens(input_ids), []
        for k, layer in enumerate(self.layers):
            window = self.config.windows[k] if self.config.windows else None
            x, cache = layer(x, rotary, masks(window), past[k] if past else None)
            caches.append(cache)
        return self.norm(x), caches


class LlamaForCausalLM(Module):
    """input_ids [batch, seq] -> (logits [batch, seq, vocab], per-layer (keys, values) [batch, kv_heads, past +
    seq, head_dim]). past: the caches of earlier positions; attention_mask: [batch, past + seq], 1 = token;
    position_ids [batch, seq]: the rotary positions (default past, past + 1, ...; left-padded rows count from
    their first token); key_positions [batch, past + seq]: every key's position, which the sliding windows
    measure from position_ids by (default: a key's index; a paged cache's keys are not in position order).
    With tie_word_embeddings the head reads model.embed_tokens.weight and no lm_head.weight is declared.
    quantize="int8": the projections (and an untied head), and a mixture's stacked experts, hold Q8_0 weights
    (luminal/nn/quantized.py)."""

    def __init__(self, config: Any, quantize: str | None = None) -> None:
        super().__init__()
        self.config = cfg = config if isinstance(config, LlamaConfig) else LlamaConfig.from_hf(config)
        self.model = LlamaModel(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False, dtype=cfg.dtype)
        quantize_modules(self, quantize)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        past: list[KVCache] | None = None,
        position_ids: Tensor | None = None,
        key_positions: Tensor | None = None,
    ) -> tuple[Tensor, list[KVCache]]:
        hidden, caches = self.model(input_ids, attention_mask, past, position_ids, key_positions)
        if self.config.tie_word_embeddings:
            return self.model.embed_tokens.attend(hidden), caches
        return self.lm_head(hidden), caches
