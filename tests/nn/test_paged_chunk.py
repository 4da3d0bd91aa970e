"""The paged chunk graph: a prompt fed in chunks through block pools gives, at each chunk's last position, the
logits of a full transformers forward pass, and leaves in the pools the keys and values a decode step then
reads (reference interpreter and compiled on the CPU; GPT-2, a grouped-query Llama, and sliding windows: Mistral's
on every layer, Qwen2's, Gemma 2's and Gemma 3's on some; Qwen3's q/k norms with its biases and a window; Phi-3's
fused projections with a partial rotation and a window; Mixtral's experts routed per chunk token); with rope scaling
(Phi-3's longrope among them), each chunk's and step's logits equal transformers' fed the same pieces through its
cache."""

import numpy as np
import pytest
import torch
import transformers

import luminal as lm
from luminal.nn.models.gemma import GemmaForCausalLM
from luminal.nn.models.gpt2 import GPT2LMHeadModel
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.paged_decoding import paged_chunk_graph, paged_step_graph, pool_name
from tests.nn.hf import max_error, tiny_model
from tests.nn.rope_cases import PHI3, phi3_longrope, scaled_llama

MODELS = {
    "gpt2": (GPT2LMHeadModel, transformers.GPT2Config(vocab_size=40, n_positions=64, n_embd=24, n_layer=2, n_head=3)),
    "llama": (LlamaForCausalLM, transformers.LlamaConfig(vocab_size=40, hidden_size=24, intermediate_size=36,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rope_theta=100.0)),
    # Sliding windows shorter than a block and than a chunk, so windows start mid-block and inside the chunk.
    "mistral_window_3": (LlamaForCausalLM, transformers.MistralConfig(vocab_size=40, hidden_size=24,
              intermediate_size=36, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              rope_theta=100.0, sliding_window=3)),
    # Layer 0 attends fully, layer 1 through a window of 5: two masks in one graph.
    "qwen2_full_then_window_5": (LlamaForCausalLM, transformers.Qwen2Config(vocab_size=40, hidden_size=24,
              intermediate_size=36, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              rope_theta=100.0, use_sliding_window=True, sliding_window=5, max_window_layers=1)),
    # Per-head q/k norms, head_dim 8 (not 24 / 4), biases on all four projections, layer 1 windowed as above.
    "qwen3_head_dim_8_window_5": (LlamaForCausalLM, transformers.Qwen3Config(vocab_size=40, hidden_size=24,
              intermediate_size=36, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
              attention_bias=True, rope_theta=100.0, use_sliding_window=True, sliding_window=5, max_window_layers=1)),
    # Sliding then global layers, soft-capped (Gemma 2); Gemma 3's q/k norms and a rope per layer kind.
    "gemma2_window_3": (GemmaForCausalLM, transformers.Gemma2Config(vocab_size=40, hidden_size=24,
              intermediate_size=36, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
              query_pre_attn_scalar=10, rope_theta=100.0, sliding_window=3, attn_logit_softcapping=2.0,
              final_logit_softcapping=10.0)),
    "gemma3_window_3": (GemmaForCausalLM, transformers.Gemma3TextConfig(vocab_size=40, hidden_size=24,
              intermediate_size=36, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
              query_pre_attn_scalar=10, sliding_window=3, sliding_window_pattern=2, rope_parameters={
                  "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0},
                  "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}})),
    # Fused qkv_proj and gate_up_proj, 12 of 16 features rotated, a window of 3 on every layer.
    "phi3_partial_window_3": (LlamaForCausalLM, transformers.Phi3Config(**{**PHI3, "rope_parameters": None},
              rope_theta=100.0, sliding_window=3)),
    # A mixture of experts on both layers (4 experts, 2 per token, routed per chunk token) and Mixtral's window.
    "mixtral_window_5": (LlamaForCausalLM, transformers.MixtralConfig(vocab_size=40, hidden_size=24,
              intermediate_size=20, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              rope_theta=100.0, num_local_experts=4, num_experts_per_tok=2, sliding_window=5)),
}  # fmt: skip
SIZE = 4  # positions per block: small, so chunks start and end inside blocks


def _feed(tokens, length, table, pools):
    """One row's chunk of `tokens` at positions length.. through its block `table` (as PagedCache feeds it)."""
    slots = [table[p // SIZE] * SIZE + p % SIZE for p in range(length, length + len(tokens))]
    row_blocks = max(-(-length // SIZE), 1)
    return {
        "input_ids": np.array([tokens], np.int64),
        "position_ids": np.array([[length]], np.int64),
        "block_table": np.array([table[:row_blocks]], np.int64),
        "slots": np.array([slots], np.int64),
        **pools,
    }


def _chunked_logits(chunk_run, step_run, layers, kv_heads, head_dim, prompt, chunks, next_tokens):
    """Feed `prompt` in `chunks` (lengths), then a decode step of each of `next_tokens`: the logits after each."""
    table = [5, 2, 7, 0, 3, 1, 6, 4]  # out of order: the pools are read through the table
    shape = (8, kv_heads, SIZE, head_dim)
    pools = {pool_name(k, p): np.zeros(shape, np.float32) for k in range(layers) for p in ("key", "value")}
    got, length = [], 0
    for n in chunks:
        out = chunk_run(_feed(prompt[length : length + n], length, table, pools))
        pools = {name: out[name] for name in pools}
        got.append(out["logits"][0])
        length += n
    for token in next_tokens:
        out = step_run(_feed([token], length, table, pools))
        pools = {name: out[name] for name in pools}
        got.append(out["logits"][0])
        length += 1
    return got


def _runs(model, weights, compiled):
    """(the chunk graph, a run of it, a run of the step graph): interpreted, or compiled for the CPU."""
    chunk = paged_chunk_graph(model, max_batch=2, max_positions=32, block_size=SIZE, max_chunk=32).bind(weights)
    step = paged_step_graph(model, max_batch=2, max_positions=32, block_size=SIZE).bind(weights)
    if compiled:
        return chunk, *(lm.compile(g, target="cpu", cache=False).run for g in (chunk, step))
    return chunk, *(lambda feed, g=g: lm.run(g, feed) for g in (chunk, step))


@pytest.mark.parametrize("compiled", [False, True], ids=["reference", "cpu"])
@pytest.mark.parametrize("name", MODELS)
def test_chunks_then_a_step_match_a_full_forward_pass(name, compiled):
    ours, config = MODELS[name]
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    chunk, chunk_run, step_run = _runs(ours(config.to_dict()), weights, compiled)
    tokens = np.random.default_rng(1).integers(0, 40, 20).tolist()
    chunks = [6, 1, 9, 3]  # a chunk ending mid-block, one token, one crossing two block edges
    pool = chunk.nodes[chunk.inputs[pool_name(0, "key")]].shape
    got = _chunked_logits(chunk_run, step_run, 2, pool[1], pool[3], tokens[:19], chunks, tokens[19:])
    with torch.no_grad():
        full = hf(torch.tensor([tokens])).logits[0].numpy()
    ends = np.cumsum(chunks) - 1
    for logits, position in zip(got, [*ends, 19], strict=True):
        assert max_error(logits, full[position]) < 1e-4, position


def test_chunk_rows_of_one_length_run_together():
    """Two rows in one chunk, each with its own cached length and blocks."""
    ours, config = MODELS["llama"]
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    chunk = paged_chunk_graph(ours(config.to_dict()), max_batch=2, max_positions=32, block_size=SIZE).bind(weights)
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, 40, 10).tolist(), rng.integers(0, 40, 7).tolist()
    shape = (8, 2, SIZE, 6)
    pools = {pool_name(k, p): np.zeros(shape, np.float32) for k in range(2) for p in ("key", "value")}
    tables = [[0, 1, 2], [3, 4, 5]]
    for row, table in ((a, tables[0]), (b, tables[1])):  # each row's first chunk alone: rows of 7 and 4 tokens
        out = lm.run(chunk, _feed(row[:-3], 0, table, pools))
        pools = {n: out[n] for n in pools}
    rows = [_feed(row[-3:], len(row) - 3, t, pools) for row, t in ((a, tables[0]), (b, tables[1]))]
    feed = {n: np.concatenate([r[n] for r in rows]) for n in ("input_ids", "position_ids", "slots")}
    width = max(r["block_table"].shape[1] for r in rows)
    feed["block_table"] = np.array([t[:width] for t in tables], np.int64)
    out = lm.run(chunk, {**feed, **pools})
    with torch.no_grad():
        for r, row in enumerate((a, b)):
            assert max_error(out["logits"][r], hf(torch.tensor([row])).logits[0, -1].numpy()) < 1e-4


def _fed_in_pieces(hf, tokens, pieces):
    """transformers' last-position logits after each piece (lengths) of `tokens`, fed through one cache: its
    dynamic rope recomputes inv_freq at each call from the largest position so far."""
    cache, got, start = transformers.DynamicCache(config=hf.config), [], 0
    with torch.no_grad():
        for n in pieces:
            logits = hf(torch.tensor([tokens[start : start + n]]), cache=cache, use_cache=True).logits
            got.append(logits[0, -1].numpy())
            start += n
    return got


@pytest.mark.parametrize(
    "case, chunks, compiled",
    [
        ("llama3-tied", [6, 5, 9], False),
        ("yarn", [6, 5, 9], False),
        ("dynamic", [20], False),  # the whole prompt as one chunk, as generate() prefills it
        ("dynamic", [6, 5, 9], False),  # within the context, then past it: a base per chunk
        ("dynamic", [6, 5, 9], True),
        ("phi3-longrope", [20], False),
        ("phi3-longrope", [6, 5, 9], True),  # short factors within the context, then long ones
    ],
)
def test_scaled_rope_chunks_and_steps_match_hugging_face(case, chunks, compiled):
    """A 20-token prompt in chunks through block pools over a context of 8, then 3 decode steps."""
    config = phi3_longrope() if case == "phi3-longrope" else scaled_llama(case)
    hf, weights = tiny_model(transformers.AutoModelForCausalLM.from_config, config)
    _, chunk_run, step_run = _runs(LlamaForCausalLM(config.to_dict()), weights, compiled)
    tokens = np.random.default_rng(3).integers(0, 40, 23).tolist()
    got = _chunked_logits(chunk_run, step_run, 2, 2, 16, tokens[:20], chunks, tokens[20:])
    want = _fed_in_pieces(hf, tokens, [*chunks, 1, 1, 1])
    for k, (logits, expected) in enumerate(zip(got, want, strict=True)):
        assert max_error(logits, expected) < 1e-4, k
    if case != "dynamic" and (case != "phi3-longrope" or chunks[0] > 8):  # fixed for the whole prompt: the same as
        # one full forward pass (longrope's first chunk within the context divides by short_factor, the full pass not)
        with torch.no_grad():
            full = hf(torch.tensor([tokens])).logits[0].numpy()
        for logits, position in zip(got, [*np.cumsum(chunks) - 1, 20, 21, 22], strict=True):
            assert max_error(logits, full[position]) < 1e-4, position
