"""Gemma 2 and Gemma 3 (text) configs read from Hugging Face's: what differs from Llama is data here, how it is
computed is in luminal/nn/models/gemma.py.

Both: head_dim given, attention scaled by query_pre_attn_scalar^-0.5, sliding-window and global layers (layer_types,
else Gemma 2's every other layer or Gemma 3's sliding_window_pattern), final logit soft-capping when set.
Gemma 2 soft-caps attention logits (attn_logit_softcapping). Gemma 3 rotates its sliding layers by their own
rope (transformers 5: rope_parameters["sliding_attention"]; 4: rope_local_base_freq, unscaled) and its global
layers by rope_parameters["full_attention"] (4: rope_theta and rope_scaling).

Refused, naming the field: use_bidirectional_attention (not causal), a Gemma 3 attn_logit_softcapping
(transformers stores it but never applies it, other implementations do: a checkpoint setting it is ambiguous),
unknown layer types or activations, sliding layers without a sliding_window, and what RopeScaling refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from luminal import dtypes as dt
from luminal.nn.activation import HF_ACTIVATIONS
from luminal.nn.models.config import load_config, pick
from luminal.nn.rope_scaling import RopeScaling

KINDS = ("gemma2", "gemma3_text")
SLIDING, FULL = "sliding_attention", "full_attention"


@dataclass(frozen=True)
class Rope:
    """One layer type's rotary embedding: base frequency and scaling."""

    theta: float = 10000.0
    scaling: RopeScaling = RopeScaling()


@dataclass(frozen=True)
class GemmaConfig:
    model_type: str = "gemma2"
    vocab_size: int = 256000
    hidden_size: int = 2304
    intermediate_size: int = 9216
    num_hidden_layers: int = 26
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int = 256
    hidden_activation: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False  # on all four projections
    query_pre_attn_scalar: float = 256  # attention scores are scaled by its inverse square root, not head_dim's
    attn_logit_softcapping: float | None = None  # scores -> cap * tanh(scores / cap) before the mask (Gemma 2)
    final_logit_softcapping: float | None = None  # logits -> cap * tanh(logits / cap)
    tie_word_embeddings: bool = True
    # Per layer, the sliding window (keys a query may see, itself included) or None for full attention.
    windows: tuple[int | None, ...] = ()
    global_rope: Rope = Rope()  # full-attention layers' (Gemma 2: every layer's)
    local_rope: Rope = Rope()  # sliding layers' (Gemma 3; Gemma 2 uses global_rope everywhere)
    dtype: dt.DType = dt.float32  # parameters' and activations' (from_hf: float32, as LlamaConfig)

    @classmethod
    def from_hf(cls, config: Any) -> GemmaConfig:
        raw = load_config(config)
        kind = raw.get("model_type")
        if kind not in KINDS:
            raise NotImplementedError(f"Gemma: model_type {kind!r} is not built ({', '.join(KINDS)})")
        if raw.get("use_bidirectional_attention"):
            raise NotImplementedError(f"{kind}: use_bidirectional_attention is not built (decoders are causal)")
        if kind == "gemma3_text" and raw.get("attn_logit_softcapping") is not None:
            raise NotImplementedError(
                "gemma3_text: attn_logit_softcapping is not built (transformers ignores it for Gemma 3)"
            )
        act = raw.get("hidden_activation") or "gelu_pytorch_tanh"
        if act not in HF_ACTIVATIONS:
            raise ValueError(f"{kind}: hidden_activation {act!r} is not built ({', '.join(sorted(HF_ACTIVATIONS))})")
        layers = raw.get("num_hidden_layers", 26)
        global_rope, local_rope = _ropes(kind, raw)
        capped = kind == "gemma2"  # transformers' defaults: Gemma 2 caps both (50, 30), Gemma 3 neither; null: no cap
        return pick(
            cls,
            raw,
            attn_logit_softcapping=raw.get("attn_logit_softcapping", 50.0 if capped else None),
            final_logit_softcapping=raw.get("final_logit_softcapping", 30.0 if capped else None),
            hidden_activation=act,
            windows=_windows(kind, raw, layers),
            global_rope=global_rope,
            local_rope=local_rope,
            attention_bias=bool(raw.get("attention_bias")),
            tie_word_embeddings=raw.get("tie_word_embeddings", True),
            dtype=dt.float32,
        )

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads

    @property
    def head_size(self) -> int:
        return self.head_dim

    def rope_of(self, layer: int) -> Rope:
        return self.local_rope if self.windows[layer] is not None else self.global_rope


def _windows(kind: str, raw: dict, layers: int) -> tuple[int | None, ...]:
    types = raw.get("layer_types")
    if types is None:  # transformers' defaults: Gemma 2 alternates from a sliding layer, Gemma 3 every n-th is full
        every = 2 if kind == "gemma2" else raw.get("sliding_window_pattern") or 6
        types = [SLIDING if (k + 1) % every else FULL for k in range(layers)]
    if len(types) != layers or not set(types) <= {SLIDING, FULL}:
        raise ValueError(f"{kind}: layer_types must name {SLIDING!r} or {FULL!r} for each of {layers} layers")
    window = raw.get("sliding_window")
    if SLIDING in types and not (isinstance(window, int) and window > 0):
        raise ValueError(f"{kind}: sliding layers need sliding_window, a positive integer; got {window!r}")
    return tuple(window if t == SLIDING else None for t in types)


def _ropes(kind: str, raw: dict) -> tuple[Rope, Rope]:
    """(global, local) rope: Gemma 2 has one; Gemma 3 one per layer type, in either transformers' spelling."""
    params = raw.get("rope_parameters")
    if kind == "gemma2":
        rope = _rope(raw, params or raw.get("rope_scaling") or {}, raw.get("rope_theta", 10000.0))
        return rope, rope
    if params and (FULL in params or SLIDING in params):  # transformers 5
        full, sliding = params.get(FULL) or {}, params.get(SLIDING) or {}
        return _rope(raw, full, 1_000_000.0), _rope(raw, sliding, 10_000.0)
    if params:
        raise ValueError(f"gemma3_text: rope_parameters must be keyed by layer type ({FULL!r}, {SLIDING!r})")
    full = _rope(raw, raw.get("rope_scaling") or {}, raw.get("rope_theta", 1_000_000.0))
    return full, Rope(float(raw.get("rope_local_base_freq", 10_000.0)))  # transformers 4: local layers unscaled


def _rope(raw: dict, params: dict, default_theta: float) -> Rope:
    theta = float(params.get("rope_theta", default_theta))
    return Rope(theta, RopeScaling.from_hf({**raw, "rope_parameters": params, "rope_scaling": None}))
