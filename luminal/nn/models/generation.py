"""Autoregressive decoding with a KV cache: one prefill graph, one decode-step graph, greedy and sampled generation.

The prefill graph reads the prompt, input_ids [batch, seq], and outputs the last position's logits
[batch, vocab] and every layer's cache, present.{layer}.key / .value [batch, kv_heads, seq, head_dim].
The step graph reads one new token per row, input_ids [batch, 1], and the caches as past.{layer}.key / .value
whose length `past` is a symbol, so one graph serves every step; it outputs the next logits and the grown
caches.

With `padded=True` both graphs also take attention_mask (1 = token, covering the cache and the new tokens)
and position_ids, so prompts of different lengths share a batch, left-padded as Hugging Face's generate()
expects: a row's positions count from its first real token.
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
    padded: bool

    def bind(self, weights: Mapping[str, Any]) -> DecoderGraphs:
        self.prefill.bind(weights)
        self.step.bind(weights)
        return self


def _record(model: Module, g: lm.Graph, batch, seq, padded: bool, past=None) -> None:
    """Inputs of one step (input_ids [batch, seq], and with `padded` attention_mask over past + seq keys and
    position_ids), the model's ops, and the outputs: the next token's logits and the grown caches."""
    ids = g.input("input_ids", (batch, seq), lm.int64)
    mask = positions = None
    if padded:
        keys = seq if past is None else past[0][0].shape[2] + seq
        mask = g.input("attention_mask", (batch, keys), lm.int64)
        positions = g.input("position_ids", (batch, seq), lm.int64)
    logits, caches = model(ids, mask, past, positions)
    logits[:, -1].output("logits")  # only the next token's distribution leaves the graph
    for k, (key, value) in enumerate(caches):
        key.output(f"present.{k}.key")
        value.output(f"present.{k}.value")


def decoder_graphs(model: Module, max_batch: int = 16, max_positions: int = 512, padded: bool = False) -> DecoderGraphs:
    """The prefill and decode-step graphs of a causal LM module (weights unbound, under checkpoint names)."""
    layers, kv_heads, head_dim = cache_layout(model)
    batch = lm.sym("batch", max=max_batch)

    prefill = lm.Graph()
    _record(model, prefill, batch, lm.sym("seq", max=max_positions), padded)

    step = lm.Graph()
    past_len = lm.sym("past", max=max_positions - 1)
    dtype = getattr(model.config, "dtype", lm.float32)  # the caches hold what the model computes in
    past = [
        tuple(step.input(f"past.{k}.{part}", (batch, kv_heads, past_len, head_dim), dtype) for part in ("key", "value"))
        for k in range(layers)
    ]
    _record(model, step, batch, 1, padded, past)
    return DecoderGraphs(prefill, step, layers, padded)


Runner = Callable[[lm.Graph, dict[str, np.ndarray]], dict[str, np.ndarray]]


def positions_of(attention_mask: np.ndarray) -> np.ndarray:
    """Each token's position counted from its row's first real token (padding gets 1, as Hugging Face does)."""
    positions = np.cumsum(attention_mask, axis=-1) - 1
    return np.where(attention_mask == 0, 1, positions).astype(np.int64)


Chooser = Callable[[np.ndarray], np.ndarray]  # logits [batch, vocab] -> the next token per row, int64 [batch]


def greedy_generate(
    graphs: DecoderGraphs,
    input_ids: np.ndarray,
    max_new_tokens: int,
    attention_mask: np.ndarray | None = None,
    run: Runner = lm.run,
    eos_token_id: int | None = None,
    pad_token_id: int = 0,
) -> np.ndarray:
    """input_ids [batch, seq] (int64) followed by `max_new_tokens` argmax tokens: [batch, seq + new].

    attention_mask [batch, seq] marks left padding (graphs built with padded=True). `run(graph, inputs)`
    executes a graph: the reference interpreter by default; a compiled program's run works too. A row that
    emits `eos_token_id` is finished: pad_token_id follows, and decoding stops once every row is (as
    Hugging Face's generate does, so the result may be shorter).
    """
    argmax = lambda logits: logits.argmax(-1)  # noqa: E731
    return generate(graphs, input_ids, max_new_tokens, argmax, attention_mask, run, eos_token_id, pad_token_id)


def sample_generate(
    graphs: DecoderGraphs,
    input_ids: np.ndarray,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    attention_mask: np.ndarray | None = None,
    run: Runner = lm.run,
    eos_token_id: int | None = None,
    pad_token_id: int = 0,
) -> np.ndarray:
    """Like greedy_generate, each token drawn from softmax(logits / temperature) restricted as Hugging Face's
    generate(do_sample=True) restricts it: to the `top_k` most likely tokens, then to the smallest set whose
    probability reaches `top_p` (the most likely token always stays). `seed` makes the draws repeatable."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature} (greedy_generate is the limit at 0)")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    rng = np.random.default_rng(seed)

    def choose(logits: np.ndarray) -> np.ndarray:
        probs = allowed_probabilities(logits, temperature, top_k, top_p)
        return np.array([rng.choice(len(row), p=row) for row in probs], np.int64)

    return generate(graphs, input_ids, max_new_tokens, choose, attention_mask, run, eos_token_id, pad_token_id)


def allowed_probabilities(
    logits: np.ndarray, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    """The sampling distribution per row [batch, vocab]: tempered softmax, zero outside top-k and the nucleus."""
    scaled = logits.astype(np.float64) / temperature
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = np.sort(scaled, axis=-1)[:, -top_k][:, None]
        scaled = np.where(scaled < kth, -np.inf, scaled)
    probs = np.exp(scaled - scaled.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    if top_p is not None and top_p < 1:
        order = np.argsort(-probs, axis=-1, kind="stable")
        ranked = np.take_along_axis(probs, order, -1)
        before = np.cumsum(ranked, -1) - ranked  # probability of the tokens ranked above each one
        keep = np.zeros_like(probs, dtype=bool)
        np.put_along_axis(keep, order, before < top_p, -1)  # the top token has 0 before it: always kept
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(-1, keepdims=True)
    return probs


def generate(
    graphs: DecoderGraphs,
    input_ids: np.ndarray,
    max_new_tokens: int,
    choose: Chooser,
    attention_mask: np.ndarray | None = None,
    run: Runner = lm.run,
    eos_token_id: int | None = None,
    pad_token_id: int = 0,
) -> np.ndarray:
    """The decoding loop: prefill once, then one step graph run per new token, `choose` picking it."""
    if (attention_mask is not None) != graphs.padded:
        raise ValueError("an attention_mask goes with graphs built with padded=True, and only with those")
    tokens = np.asarray(input_ids, np.int64)
    feed: dict[str, np.ndarray] = {"input_ids": tokens}
    if graphs.padded:
        mask = np.asarray(attention_mask, np.int64)
        feed.update(attention_mask=mask, position_ids=positions_of(mask))
    out = run(graphs.prefill, feed)
    finished = np.zeros(tokens.shape[0], bool)
    for _ in range(max_new_tokens):
        next_ids = np.asarray(choose(out["logits"]), np.int64)
        next_ids = np.where(finished, pad_token_id, next_ids)[:, None]
        tokens = np.concatenate([tokens, next_ids], axis=1)
        if eos_token_id is not None:
            finished |= next_ids[:, 0] == eos_token_id
        if tokens.shape[1] == input_ids.shape[1] + max_new_tokens or finished.all():
            break
        feed = {"input_ids": next_ids}
        if graphs.padded:
            mask = np.concatenate([mask, np.ones_like(next_ids)], axis=1)
            feed.update(attention_mask=mask, position_ids=positions_of(mask)[:, -1:])
        for k in range(graphs.layers):
            feed[f"past.{k}.key"], feed[f"past.{k}.value"] = out[f"present.{k}.key"], out[f"present.{k}.value"]
        out = run(graphs.step, feed)
    return tokens
