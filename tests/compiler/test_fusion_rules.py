"""Fusion as the search chooses it: the rule sets offer `Inline` alternatives, extraction picks them, and the
kernel IR carries them out (compiler/fusion/fuse_chosen.py) with no help from the single-consumer policy.

Every candidate is also checked against the interpreter, on the interpreter and compiled (check_every_candidate).
"""

import numpy as np

import luminal as lm
import luminal.functional as F
from luminal.compiler.analysis.cost import estimate
from luminal.compiler.cpu import codegen_gemm
from luminal.compiler.graph.fused_ops import Inline
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.lower import lower
from luminal.compiler.program import kernel_program
from luminal.compiler.search.stage import SearchOptions, search
from tests.compiler.test_matmul import _passes, check_every_candidate

RNG = np.random.default_rng(3)


def _chosen(g: lm.Graph) -> tuple[lm.Graph, ir.KernelProgram, dict]:
    """The search candidate, its kernels and what fusion did (fused/declined reads, policy kernels)."""
    found = search(_passes(g), "cpu", SearchOptions(isolate=False))
    stats: dict = {}
    graph = found.candidates["search"]
    return graph, kernel_program(graph, "cpu", stats=stats), stats


def _flops(program: ir.KernelProgram) -> int:
    return sum(estimate(k, program.buffers, "cpu").flops for k in program.kernels)


def _reductions(kernel) -> int:
    return sum(isinstance(n, ir.Reduce) for n in ir.walk(kernel.body))


def test_an_elementwise_chain_through_views_is_one_kernel_by_the_search_alone():
    g = lm.Graph()
    x = g.input("x", (lm.sym("n", max=32), 24))
    y = ((x * 2.0 + 1.0).exp() * x).permute(1, 0).sqrt()
    y.reshape(4, 6, -1).output("y")
    graph, kernels, stats = _chosen(g)
    assert sum(isinstance(n.op, Inline) for n in graph.nodes) >= 4
    assert len(kernels.kernels) == 1 and stats["fused_by_policy"] == 0 and stats["declined"] == 0
    check_every_candidate(g, {"x": RNG.random((5, 24)).astype(np.float32)}, "element-wise chain")


def test_a_layer_norm_is_one_pass_over_each_row_by_the_search_alone():
    g = lm.Graph()
    x = g.input("x", (lm.sym("n", max=64), 128))
    w, b = g.weight("w", (128,)), g.weight("b", (128,))
    g.bind({"w": RNG.standard_normal(128).astype(np.float32), "b": RNG.standard_normal(128).astype(np.float32)})
    F.layer_norm(x, 128, w, b).output("y")
    graph, kernels, stats = _chosen(g)
    assert len(kernels.kernels) == 1 and stats["fused_by_policy"] == 0
    # The row statistics are computed once per row (hoisted), never once per element: the fused kernel does
    # at most a few times the unfused arithmetic (the mean is summed where the variance and the scaling need
    # it), not 128 times.
    unfused = lower(graph)
    assert _flops(kernels) <= 3 * _flops(unfused)
    check_every_candidate(g, {"x": RNG.standard_normal((9, 128)).astype(np.float32)}, "layer norm")


def test_a_sum_of_squares_never_stores_the_squares():
    g = lm.Graph()
    x = g.input("x", (16, 300))
    (x * x).sum(-1).sqrt().output("norm")
    _, kernels, stats = _chosen(g)
    assert len(kernels.kernels) == 1 and _reductions(kernels.kernels[0]) == 1 and stats["fused_by_policy"] == 0
    check_every_candidate(g, {"x": RNG.standard_normal((16, 300)).astype(np.float32)}, "sum of squares")


def test_a_cheap_value_is_computed_in_each_of_its_readers():
    g = lm.Graph()
    x = g.input("x", (8, 512))
    centred = x + -1.0
    centred.sum(-1).output("total")
    centred.amax(-1).output("peak")
    _, kernels, stats = _chosen(g)
    # Two reductions, each computing x - 1 itself: no kernel and no buffer for the shared value.
    assert len(kernels.kernels) == 2 and stats["fused"] == 2
    assert all(ir.buffers_read(k) == {kernels.inputs["x"]} for k in kernels.kernels)
    check_every_candidate(g, {"x": RNG.standard_normal((8, 512)).astype(np.float32)}, "shared cheap value")


def test_a_gemm_read_twice_is_computed_once():
    g = lm.Graph()
    x = g.input("x", (lm.sym("n", max=64), 48))
    w = g.weight("w", (40, 48))
    g.bind({"w": RNG.standard_normal((40, 48)).astype(np.float32)})
    h = F.linear(x, w)
    (h * 2.0).output("double")
    (h + 1.0).exp().output("exp")
    _, kernels, _ = _chosen(g)
    # Both readers chose to compute the GEMM in their loops; only one may, so it is one GEMM kernel (with
    # one reader as its epilogue) and the other reader reads its output.
    contracts = [k for k in kernels.kernels if any(isinstance(n, ir.Contract) for n in ir.walk(k.body))]
    assert len(contracts) == 1 and codegen_gemm.plan(contracts[0]) is not None
    check_every_candidate(g, {"x": RNG.standard_normal((7, 48)).astype(np.float32)}, "gemm read twice")


def test_a_broadcast_producer_is_not_offered_for_fusion():
    """An element-wise value read through an expand would be recomputed for every copy: the rules offer no
    Inline there, so the value stays a buffer of its own size."""
    g = lm.Graph()
    a = g.input("a", (64,))
    m = g.input("m", (32, 64))
    small = (a * 3.0).exp()
    (m * small.unsqueeze(0).expand(32, 64)).output("y")
    graph, _, _ = _chosen(g)
    exp = next(n for n in graph.nodes if n.op.name == "Exp2")
    readers = [n for n in graph.nodes if any(src == exp.id for src, _ in n.inputs)]
    assert readers and not any(isinstance(n.op, Inline) for n in readers)
    feed = {"a": RNG.standard_normal(64).astype(np.float32), "m": RNG.standard_normal((32, 64)).astype(np.float32)}
    check_every_candidate(g, feed, "broadcast producer")


def test_fusion_never_changes_what_recognition_chose():
    """Extraction first chooses what each e-class computes with no Inline, then what to fuse: a small causal
    block (where one-step extraction preferred the spelled-out softmax and products for the store and launch
    savings fusion promised) keeps every GEMM and the attention that fusion-free extraction picks."""
    from egglog import ruleset

    from luminal.compiler.search import rules_attention, stage
    from luminal.compiler.search.costs import roofline_cost
    from luminal.compiler.search.encode import encode, set_view_facts
    from luminal.compiler.search.extract import extract_frozen, extract_then_fuse, longest_path
    from luminal.compiler.search.runner import run_bounded
    from tests.compiler.test_artifact import block

    g, feed = block()
    enc = encode(_passes(g))
    rules_attention.add_alternatives(enc)
    set_view_facts(enc)
    for phase, rulesets in stage.PHASES.items():
        run_bounded(enc.egraph, ruleset(*(r for rs in rulesets.values() for r in rs), name=phase), 200_000, 20)
    cost = roofline_cost(enc, "cpu")

    def fusion_free(name, params):
        return float("inf") if name == "Inline" else cost(name, params)

    def recognised(graph):
        return sorted(n.op.name for n in graph.nodes if n.op.name in ("MatMul", "Attention"))

    fused, plain = extract_then_fuse(enc, cost, longest_path), extract_frozen(enc, fusion_free, longest_path)
    assert recognised(fused) == recognised(plain) == ["Attention"] + ["MatMul"] * 4
    assert any(isinstance(n.op, Inline) for n in fused.nodes)
    assert not any(isinstance(n.op, Inline) for n in plain.nodes)
    check_every_candidate(g, feed, "causal block")
