"""The GPU bench's models, built by luminal's own Llama and BERT builders, with one set of random bf16 weights.

The weights are drawn once with torch (fast on the device) under the builders' Hugging Face names; the same
tensors go to the torch implementations (bench/torch_models.py) and, viewed as numpy bfloat16 without a copy
of the values, to the luminal programs.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

import luminal as lm
from luminal.nn.models.bert import BertConfig, bert_graph
from luminal.nn.models.generation import DecoderGraphs, decoder_graphs
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from luminal.nn.models.paged_decoding import DEFAULT_BLOCK_SIZE, paged_step_graph, pool_name

INIT_STD = 0.02  # Hugging Face's initializer_range: activations keep a sane scale through 16 random layers


@dataclass(frozen=True)
class Sizes:
    """One bench configuration: the decoder, its context, the prefill length and the encoder batch."""

    name: str
    llama: LlamaConfig
    context: int  # KV positions already cached when the timed decode step runs
    prefill: int  # prompt tokens of the timed prefill
    bert: BertConfig
    encoder_batch: int
    encoder_seq: int
    sequences: int  # the batched decode step's sequences, each with `context` cached positions


FULL = Sizes(
    name="llama-1b / minilm",
    # Llama-3.2-1B's shape with Llama-2's vocabulary: ~1.1 B parameters, 2.2 GB in bf16.
    llama=LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        dtype=lm.bfloat16,
    ),
    context=512,
    prefill=512,
    # all-MiniLM-L6-v2's shape.
    bert=BertConfig(
        hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536, dtype=lm.bfloat16
    ),
    encoder_batch=32,
    encoder_seq=128,
    sequences=16,
)

SMALL = Sizes(
    name="tiny (--small)",
    llama=LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        dtype=lm.bfloat16,
    ),
    context=16,
    prefill=16,
    bert=BertConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        dtype=lm.bfloat16,
    ),
    encoder_batch=2,
    encoder_seq=8,
    sequences=3,
)


def llama_graphs(sizes: Sizes) -> DecoderGraphs:
    """The prefill and decode-step graphs of batch 1 (weights unbound); `past` and `seq` stay symbols."""
    positions = 2 * max(sizes.context + 1, sizes.prefill)  # room for the step after the cached context
    return decoder_graphs(LlamaForCausalLM(sizes.llama), max_batch=1, max_positions=positions)


def paged_graph(sizes: Sizes, max_batch: int = 1) -> lm.Graph:
    """The paged decode step of up to `max_batch` sequences (luminal/nn/models/paged_decoding.py: KV block pools
    read through a block table, written in place), with room for as many positions as llama_graphs'."""
    positions = 2 * max(sizes.context + 1, sizes.prefill)
    return paged_step_graph(LlamaForCausalLM(sizes.llama), max_batch=max_batch, max_positions=positions)


def paged_inputs(ids, past: list[tuple]) -> dict:
    """The paged step's inputs holding the concatenating step's cache `past` ([batch, kv_heads, context, dim]
    torch tensors per layer, key and value): each layer's pools are each sequence's cache cut into blocks, one
    sequence's blocks after another's, the block table counts them in order, and each new token goes to position
    `context` (the blocks have room for it)."""
    import torch

    batch, kv_heads, context, dim = past[0][0].shape
    row_blocks = context // DEFAULT_BLOCK_SIZE + 1
    table = torch.arange(batch * row_blocks, device=ids.device).reshape(batch, row_blocks)
    slot = (table[:, -1:] * DEFAULT_BLOCK_SIZE + context % DEFAULT_BLOCK_SIZE).contiguous()
    position = torch.full((batch, 1), context, dtype=torch.int64, device=ids.device)
    out = {"input_ids": ids, "position_ids": position, "block_table": table, "slots": slot}
    for k, pair in enumerate(past):
        for part, cache in zip(("key", "value"), pair):
            padded = cache.new_zeros((batch, kv_heads, row_blocks * DEFAULT_BLOCK_SIZE, dim))
            padded[:, :, :context] = cache
            blocks = padded.reshape(batch, kv_heads, row_blocks, DEFAULT_BLOCK_SIZE, dim).permute(0, 2, 1, 3, 4)
            out[pool_name(k, part)] = blocks.reshape(batch * row_blocks, kv_heads, DEFAULT_BLOCK_SIZE, dim)
    return out


def encoder_graph(sizes: Sizes) -> lm.Graph:
    """The BERT encoder (last hidden state) at the bench's batch, sequence a symbol up to its length."""
    return bert_graph(sizes.bert, max_batch=sizes.encoder_batch, max_seq=sizes.encoder_seq)


def shapes_of(graph: lm.Graph) -> dict[str, tuple[int, ...]]:
    """Every weight's shape by name."""
    return {name: tuple(int(d) for d in graph.nodes[node].shape) for name, node in graph.weights.items()}


def random_weights(shapes: dict[str, tuple[int, ...]], device: str, seed: int = 0) -> dict:
    """torch bf16 tensors on `device`: normal(0, INIT_STD) matrices, ones for 1-d parameters (norm scales) and
    zeros for biases, as a freshly initialised Hugging Face model has them."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    out = {}
    for name, shape in sorted(shapes.items()):
        if len(shape) > 1:
            w = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * INIT_STD
        elif name.endswith("bias"):
            w = torch.zeros(shape, device=device)
        else:
            w = torch.ones(shape, device=device)
        out[name] = w.to(torch.bfloat16)
    return out


def as_numpy(t) -> np.ndarray:
    """A torch tensor as numpy on the host; bfloat16 as ml_dtypes.bfloat16 through its raw bits (no rounding)."""
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def zero_weights(graph: lm.Graph) -> dict[str, np.ndarray]:
    """Zeros of every weight's shape and dtype, for a compile that needs shapes only (the search never reads
    weight values); np.zeros is lazily mapped, so a 2 GB model costs no memory until something reads it."""
    return {
        name: np.zeros(shape, graph.nodes[graph.weights[name]].dtype.np) for name, shape in shapes_of(graph).items()
    }


def parameter_count(shapes: dict[str, tuple[int, ...]]) -> int:
    return sum(int(np.prod(s)) for s in shapes.values())


def decode_bytes(sizes: Sizes, shapes: dict[str, tuple[int, ...]]) -> tuple[int, int]:
    """(weight bytes, KV bytes) one decode step must read at batch 1: every weight except the embedding table
    (of which one row is read), and the keys and values of every cached position, all bf16."""
    cfg = sizes.llama
    embed = "model.embed_tokens.weight"
    weights = 2 * (parameter_count({k: v for k, v in shapes.items() if k != embed}) + cfg.hidden_size)
    if cfg.tie_word_embeddings:
        weights += 2 * cfg.vocab_size * cfg.hidden_size  # the tied head reads the whole table
    kv = 2 * 2 * cfg.num_hidden_layers * cfg.kv_heads * sizes.context * cfg.head_size
    return weights, kv
