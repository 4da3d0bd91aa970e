"""From a Hugging Face model folder (config.json + *.safetensors) to a bound luminal graph.

The architecture comes from config.json's model_type; a sentence-transformers folder (modules.json) gives a
sentence-embedding graph. Weights bind by name, so a checkpoint that lacks one of the graph's weights is
reported by name rather than run with garbage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import luminal as lm
from luminal.graph import GraphError
from luminal.nn.models.bert import bert_graph
from luminal.nn.models.checkpoint import align_names, read_checkpoint, widen_to_float32
from luminal.nn.models.config import load_config, sequence_pads
from luminal.nn.models.expert_checkpoint import stack_experts
from luminal.nn.models.gemma import GemmaForCausalLM
from luminal.nn.models.gpt2 import GPT2LMHeadModel
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.sentence import sentence_graph
from luminal.nn.module import Module

CAUSAL_LMS = {
    "gemma2": GemmaForCausalLM,
    "gemma3_text": GemmaForCausalLM,
    "gpt2": GPT2LMHeadModel,
    "llama": LlamaForCausalLM,
    "mistral": LlamaForCausalLM,
    "qwen2": LlamaForCausalLM,
    "qwen3": LlamaForCausalLM,
    "phi3": LlamaForCausalLM,
    "mixtral": LlamaForCausalLM,
    "qwen3_moe": LlamaForCausalLM,
}


def causal_lm(config: Any, quantize: str | None = None) -> Module:
    """The config's causal LM module; quantize="int8" gives Q8_0 projections (luminal/nn/quantized.py)."""
    raw = load_config(config)
    kind = raw.get("model_type")
    if kind not in CAUSAL_LMS:
        raise NotImplementedError(f"model_type {kind!r}: causal LMs built are {sorted(CAUSAL_LMS)}")
    return CAUSAL_LMS[kind](raw, quantize=quantize)


def max_positions(raw: dict[str, Any]) -> int:
    """The longest sequence the config declares (learned position tables cannot go further)."""
    return int(raw.get("max_position_embeddings") or raw.get("n_positions") or 2048)


def model_graph(config: Any, max_batch: int = 64, max_seq: int | None = None) -> lm.Graph:
    """Inputs input_ids and attention_mask ([batch, seq] int64, symbolic); BERT outputs last_hidden_state
    (token_type_ids is a third input), causal LMs output logits [batch, seq, vocab]. Weights unbound.
    max_seq None: the config's maximum positions."""
    raw = load_config(config)
    max_seq = max_seq or max_positions(raw)
    if raw.get("model_type") == "bert":
        return bert_graph(raw, max_batch, max_seq)
    model = causal_lm(raw)
    g = lm.Graph()
    shape = (lm.sym("batch", max=max_batch), lm.sym("seq", max=max_seq))
    # Causal and masked: right padding changes no real position's logits (see `luminal.padding`).
    pads = sequence_pads(raw)
    ids, mask = (g.input(n, shape, lm.int64, pad=pads[n]) for n in ("input_ids", "attention_mask"))
    logits, _ = model(ids, mask)
    logits.output("logits")
    return g


def graph_from_folder(folder: str | Path, max_batch: int = 64, max_seq: int | None = None) -> lm.Graph:
    """The folder's model as a graph with its weights bound; raises GraphError naming any weight not found."""
    folder = Path(folder)
    if (folder / "modules.json").exists():
        return sentence_graph(folder, max_batch, max_seq)
    g = model_graph(folder / "config.json", max_batch, max_seq)
    g.bind(align_names(list(g.weights), stack_experts(widen_to_float32(read_checkpoint(folder)))))
    missing = g.unbound_weights()
    if missing:
        raise GraphError(f"{len(missing)} weight(s) not in the checkpoint, e.g. {missing[:5]}")
    return g
