"""Which layers of a Llama-family decoder are sparse mixtures of experts, and their shape, from a Hugging Face
config: Mixtral (model_type mixtral, every layer) and Qwen3-MoE (qwen3_moe, the layers decoder_sparse_step and
mlp_only_layers leave sparse). router_aux_loss_coef, output_router_logits and router_jitter_noise only matter in
training and are ignored."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class MoeConfig:
    experts: int
    top_k: int  # experts each token runs (num_experts_per_tok)
    intermediate_size: int  # each expert's SwiGLU width (Qwen3-MoE's dense layers use the model's own)
    renormalize: bool  # the k probabilities rescaled to sum to 1: Mixtral always, Qwen3-MoE with norm_topk_prob
    sparse_layers: tuple[int, ...]  # the layers whose feed-forward is this mixture; the rest are dense SwiGLUs

    @classmethod
    def from_hf(cls, kind: str, raw: Mapping[str, Any], layers: int) -> MoeConfig | None:
        """The mixture a mixtral or qwen3_moe config declares; None for the dense model types."""
        # transformers 5 writes num_local_experts for both (num_experts is its alias); Qwen's own configs num_experts
        experts = raw.get("num_local_experts", raw.get("num_experts", 8 if kind == "mixtral" else 128))
        if kind == "mixtral":
            width, renormalize, sparse = raw.get("intermediate_size", 14336), True, tuple(range(layers))
        elif kind == "qwen3_moe":
            width, renormalize = raw.get("moe_intermediate_size", 768), bool(raw.get("norm_topk_prob", False))
            step, dense = raw.get("decoder_sparse_step", 1), set(raw.get("mlp_only_layers") or ())
            sparse = tuple(k for k in range(layers) if k not in dense and experts > 0 and (k + 1) % step == 0)
        else:
            return None
        top_k = raw.get("num_experts_per_tok", 2 if kind == "mixtral" else 8)
        if sparse and not 0 < top_k <= experts:
            raise NotImplementedError(f"{kind}: num_experts_per_tok {top_k} must be within 1..{experts} experts")
        return cls(experts, top_k, width, renormalize, sparse) if sparse else None
