"""Indices folded by their loop extents after fusion (compiler/kernels/fold_indices.py): heads split from a projection
and merged back (an attention's reads and its output before the next projection) are read without a division by the
sequence length, on every target, and the results are unchanged."""

import numpy as np
import pytest

import luminal as lm
import luminal.compiler.fusion.fuse as fuse_module
import luminal.compiler.program as program_module
import luminal.functional as F
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.fold_indices import symbolic_divisions
from luminal.nn.attention import merge_heads, split_heads
from luminal.nn.models.generation import decoder_graphs
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from luminal.runtime.cuda.shim import ShimRuntime
from luminal.symbolic import Expr
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

HIDDEN, HEADS = 32, 4


def heads_merged() -> lm.Graph:
    """A projection split into heads, an element-wise op on them, the heads merged back and projected: an
    attention's reads and writes without the attention."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", max=2), lm.sym("seq", max=8), HIDDEN))
    heads = split_heads(F.linear(x, g.weight("w1", (HIDDEN, HIDDEN))), HEADS)
    F.linear(merge_heads(heads.exp()), g.weight("w2", (16, HIDDEN))).tanh().output("y")
    return bind_random(g)


def _indices(p: ir.KernelProgram) -> list[Expr]:
    """Every index expression the program's kernels compute."""
    found = []
    for k in p.kernels:
        values = [k.body] if isinstance(k, ir.LoopKernel) else [k.at, k.src, k.dest]
        for node in (n for v in values for n in ir.walk(v)):
            if isinstance(node, ir.Load):
                found.append(node.index)
            elif isinstance(node, ir.IndexValue):
                found.append(node.expr)
    return found


def _divisions(p: ir.KernelProgram) -> int:
    """The divisions and modulos by a symbol that the program's kernels compute in their indices."""
    return sum(symbolic_divisions(e) for e in _indices(p))


def _divided(e: Expr) -> list[Expr]:
    """The divisions and modulos by a symbol within `e`."""
    own = [e] if e.op in ("div", "mod") and not e.args[1].is_const else []
    return own + [d for a in e.args if isinstance(a, Expr) for d in _divided(a)]


def _feed() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 5, HIDDEN)).astype(np.float32)}


def _without_folding(monkeypatch) -> None:
    """Compiles from here on fold no index: not after fusion, nor (on a GPU target) as fusion costs a kernel."""
    monkeypatch.setattr(program_module, "fold_indices", lambda p: p)
    monkeypatch.setattr(fuse_module, "fold_value", lambda v, extents: v)


@pytest.mark.parametrize("target", ["cpu", "h100", "m2"])
def test_no_index_divides_by_the_sequence_length(target, monkeypatch):
    g = heads_merged()
    assert _divisions(lm.compile(g, target, cache=False).kernels) == 0
    _without_folding(monkeypatch)
    assert _divisions(lm.compile(g, target, cache=False).kernels) > 0  # what the views alone leave


def test_the_cpu_program_matches_the_reference():
    g = heads_merged()
    got = lm.compile(g, "cpu", cache=False).run(_feed())
    for name, want in lm.run(g, _feed()).items():
        np.testing.assert_allclose(got[name], want, rtol=2e-5, atol=2e-5, err_msg=name)


@pytest.mark.needs("g++")
def test_the_cuda_program_matches_the_reference():
    g = heads_merged()
    assert_matches(ShimRuntime().load(lm.compile(g, "h100", cache=False)).run(_feed()), lm.run(g, _feed()))


def test_a_llama_prefill_divides_by_no_launch_time_size(monkeypatch):
    """RoPE's rotate-half reads a head's other half (`-32 * (d // 32)` in its index, made up for by an offset),
    attention reads heads split from the projections, the logits read the last position (`(-1) % seq`, which
    the simplifier writes `seq - 1`): no division by a symbol is left."""
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    g = bind_random(decoder_graphs(LlamaForCausalLM(config), max_batch=1, max_positions=32).prefill)
    left = [d for e in _indices(lm.compile(g, "h100", cache=False).kernels) for d in _divided(e)]
    assert left == []
    _without_folding(monkeypatch)
    assert _divisions(lm.compile(g, "h100", cache=False).kernels) > 10
