"""Autoregressive decoding with a KV cache: one prefill graph, one decode-step graph, and greedy generation.

The prefill graph reads the prompt, input_ids [batch, seq], and outputs the last position's logits
[batch, vocab] and every layer's cache, present.{layer}.key / .value [batch, kv_heads, seq, head_dim].
The step graph reads one new token per row, input_ids [batch, 1], and the caches as past.{layer}.key / .value
whose length `past` is a symbol, so one graph serves every step; it outputs the next logits and the grown
caches. Prompts in one batch share a length (no padding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

import luminal as lm
from luminal.nn.module import Module


def cache_layout(model: Module) -> tuple[int, int, int]:
    """(layers, kv heads, head dim) of a GPT2LMHeadModel or LlamaForCausalLM."""
    cfg = model.config
    if hasattr(cfg, "n_layer"):  # GPT-2
        return cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head
    return cfg.num_hidden_layers, cfg.kv_heads, cfg.head_size


@dataclass
class DecoderGraphs:
    prefill: lm.Graph
    step: lm.Graph
    layers: int

    def bind(self, weights: Mapping[str, Any]) -> DecoderGraphs:
        self.prefill.bind(weights)
        self.step.bind(weights)
        return self


def _outputs(logits, caches) -> None:
    logits[:, -1].output("logits")  # only the next token's distribution leaves the graph
    for k, (key, value) in enumerate(caches):
        key.output(f"present.{k}.key")
        value.output(f"present.{k}.value")


def decoder_graphs(model: Module, max_batch: int = 16, max_positions: int = 512) -> DecoderGraphs:
    """The prefill and decode-step graphs of a causal LM module (weights unbound, under checkpoint names)."""
    layers, kv_heads, head_dim = cache_layout(model)
    batch = lm.sym("batch", max=max_batch)

    prefill = lm.Graph()
    _outputs(*model(prefill.input("input_ids", (batch, lm.sym("seq", max=max_positions)), lm.int64)))

    step = lm.Graph()
    past_len = lm.sym("past", max=max_positions - 1)
    past = [
        tuple(step.input(f"past.{k}.{part}", (batch, kv_heads, past_len, head_dim)) for part in ("key", "value"))
        for k in range(layers)
    ]
    _outputs(*model(step.input("input_ids", (batch, 1), lm.int64), past=past))
    return DecoderGraphs(prefill, step, layers)


Runner = Callable[[lm.Graph, dict[str, np.ndarray]], dict[str, np.ndarray]]


def greedy_generate(
    graphs: DecoderGraphs, input_ids: np.ndarray, max_new_tokens: int, run: Runner = lm.run
) -> np.ndarray:
    """input_ids [batch, seq] (int64) followed by `max_new_tokens` argmax tokens: [batch, seq + new].

    `run(graph, inputs)` executes a graph (the reference interpreter by default; a compiled program's run works).
    """
    tokens = np.asarray(input_ids, np.int64)
    out = run(graphs.prefill, {"input_ids": tokens})
    for _ in range(max_new_tokens):
        next_ids = out["logits"].argmax(-1).astype(np.int64)[:, None]
        tokens = np.concatenate([tokens, next_ids], axis=1)
        if tokens.shape[1] == input_ids.shape[1] + max_new_tokens:
            break
        feed = {"input_ids": next_ids}
        for k in range(graphs.layers):
            feed[f"past.{k}.key"], feed[f"past.{k}.value"] = out[f"present.{k}.key"], out[f"present.{k}.value"]
        out = run(graphs.step, feed)
    return tokens
