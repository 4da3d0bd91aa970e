"""Kernels that are functions of their indices and read-only buffers alone (compiler/fusion/fuse_index.py) are computed
by their readers on CUDA targets, and the result is unchanged."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.derived_weights import at_load
from luminal.hl import prim
from luminal.nn.models.bert import BertConfig, bert_graph
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

# A two-layer bf16 BERT: each LayerNorm's scale and shift are read by the normalisation and by the GEMM epilogue
# that adds the residual; the attention mask's logarithm is read by every layer's attention.
BERT = BertConfig(
    vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=16, dtype=lm.bfloat16,
)  # fmt: skip


def tables_read_twice() -> lm.Graph:
    """cos and sin of an iota (RoPE's tables), each read by two kernels that also read an input."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("rows", max=8), 16))
    angle = g.arange(16).float() * 0.1
    cos, sin = angle.cos(), angle.sin()
    (x * cos + x.exp() * sin).output("a")
    (x.sum(-1, keepdim=True) * cos - sin).output("b")
    return g


def test_the_tables_cost_no_launch_on_a_gpu_and_stay_kernels_on_the_cpu():
    g = tables_read_twice()
    cuda = lm.compile(g, "h100", cache=False)
    assert len(launch_plan(cuda.kernels)) == 2
    assert len(lm.compile(g, "cpu", cache=False).kernels.kernels) > 2


@pytest.mark.needs("g++")
def test_matches_the_reference():
    g = tables_read_twice()
    feed = {"x": np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)}
    assert_matches(ShimRuntime().load(lm.compile(g, "h100", cache=False)).run(feed), lm.run(g, feed))


def _bert_feed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    mask = np.ones((2, 7), np.int64)
    mask[1, 5:] = 0
    ids = rng.integers(0, 64, (2, 7))
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": rng.integers(0, 2, (2, 7))}


def test_no_kernel_only_copies_a_weight_or_transforms_an_input():
    """On a GPU no launch of a run only copies a weight or maps an input that nothing writes (the mask's
    logarithm): their readers read the weight and the input themselves, or the copy is made once at load (side-by-side
    weights of merged GEMMs: compiler/kernels/derived_weights.py); on the CPU those kernels stay."""
    g = bind_random(bert_graph(BERT, max_batch=2, max_seq=8))

    def read_only_copies(program) -> list[str]:
        kernels = program.kernels
        read_only = {b.name for b in kernels.buffers.values() if b.role in ("input", "weight")}
        return [
            k.name
            for k in kernels.kernels
            if ir.element_wise(k) and ir.buffers_read(k) and ir.buffers_read(k) <= read_only
            and k.out not in {b for b, _ in kernels.outputs.values()} and not at_load(k, kernels.buffers)
        ]  # fmt: skip

    assert read_only_copies(lm.compile(g, "h100", cache=False)) == []
    assert len(read_only_copies(lm.compile(g, "cpu", cache=False))) >= 4 * BERT.num_hidden_layers


@pytest.mark.needs("g++")
def test_the_bf16_encoder_matches_the_reference():
    g = bind_random(bert_graph(BERT, max_batch=2, max_seq=8))
    feed = _bert_feed()
    assert_matches(ShimRuntime().load(lm.compile(g, "h100", cache=False)).run(feed), lm.run(g, feed))


def _pools_at_computed_slots() -> lm.Graph:
    """Two donated pools written at slots computed from an input (slot * 4 + 1, as a paged step's slots become
    pool positions): the computed slots have two readers, both scatters."""
    g = lm.Graph()
    slots = g.input("slots", (3,), lm.int64)
    at = slots * 4 + 1
    for name in ("key", "value"):
        pool = g.input(name, (lm.sym("n", max=64), 2))
        prim.scatter(pool, at, g.input(f"{name}_src", (3,)) * 2.0).output(name)
        g.donate(name, name)
    return g


def test_scatters_compute_their_slots():
    program = lm.compile(_pools_at_computed_slots(), "h100", cache=False)
    assert [launch.shape for launch in launch_plan(program.kernels)] == ["scatters"]


@pytest.mark.needs("g++")
def test_scatters_computing_their_slots_match_the_reference():
    g = _pools_at_computed_slots()
    rng = np.random.default_rng(6)
    feed = {"slots": np.array([3, 0, 7])}
    for name in ("key", "value"):
        feed[name] = rng.standard_normal((32, 2)).astype(np.float32)
        feed[f"{name}_src"] = rng.standard_normal(3).astype(np.float32)
    want = lm.run(g, {k: v.copy() for k, v in feed.items()})
    assert_matches(ShimRuntime().load(lm.compile(g, "h100", cache=False)).run(feed), want)
