"""Phi-3 (Hugging Face's Phi3ForCausalLM, model_type "phi3": Phi-3-mini / -medium, Phi-3.5-mini, Phi-4-mini) read
as a Llama-family config (luminal/nn/models/llama.py builds it).

What differs from Llama, per transformers' modeling_phi3.py and configuration_phi3.py:
  - fused projections: self_attn.qkv_proj holds the queries', keys' and values' rows in that order, and
    mlp.gate_up_proj the gate's rows then the up projection's; no biases anywhere;
  - partial_rotary_factor (the rope dict's, else the top-level one): only a head's first
    int(head_dim * factor) features are rotated;
  - rope types default and longrope only; the older names "su" and "yarn" both mean longrope, and the
    context longrope stretches from is the top-level original_max_position_embeddings (Phi3Config's 4096 when
    absent), whatever the rope dict says;
  - sliding_window, when set, applies to every layer;
  - Phi3Config's defaults where a config.json leaves a field out (rms_norm_eps 1e-5, not Llama's 1e-6).
"""

from __future__ import annotations

from typing import Any

# Phi3Config's defaults for the fields the Llama family reads and defaults differently.
DEFAULTS = dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, rms_norm_eps=1e-5,
                max_position_embeddings=4096, original_max_position_embeddings=4096)  # fmt: skip
ROPE_TYPES = ("default", "longrope")


def phi3_as_llama(raw: dict[str, Any]) -> dict[str, Any]:
    """A Phi-3 config.json dict as the Llama family reads one: defaults filled, no biases, the rope spelled
    rope_parameters with rope_type and partial_rotary_factor in it."""
    defaults = {k: v for k, v in DEFAULTS.items() if raw.get(k) is None}
    out = {**raw, **defaults, "attention_bias": False, "mlp_bias": False}
    rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    kind = rope.get("rope_type", rope.get("type", "default"))
    kind = "longrope" if kind in ("su", "yarn") else kind  # transformers' reading of Phi-3's older names
    if kind not in ROPE_TYPES:
        raise NotImplementedError(f"phi3: rope_type {kind!r} is not built (Phi3Config allows {', '.join(ROPE_TYPES)})")
    partial = rope.get("partial_rotary_factor", raw.get("partial_rotary_factor"))
    rope.update(rope_type=kind, partial_rotary_factor=1.0 if partial is None else partial)
    return {**out, "rope_parameters": rope, "rope_scaling": None}
