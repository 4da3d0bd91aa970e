"""Matmul recognition: the search turns expand·mul·sum into MatMul, which runs as a tiled GEMM with its epilogue.

Every candidate the search extracts is checked twice: on the reference interpreter (MatMul has a numpy
reference) and compiled for the CPU, both against the reference run of the original graph.
"""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.backends import run_plan
from luminal.compiler.cpu import codegen_gemm
from luminal.compiler.graph.passes import PASSES
from luminal.compiler.kernels import ir
from luminal.compiler.program import c_source, kernel_program
from luminal.compiler.search.stage import SearchOptions, search
from luminal.runtime.cpu import CpuExecutable
from tests.graph_fuzz import random_graph

RNG = np.random.default_rng(0)


def _close(got, want, what, rtol=1e-4, atol=1e-4):
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, f"{what}: {k}"
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{what}: {k}")


def _passes(g: lm.Graph) -> lm.Graph:
    for _, run_pass in PASSES:
        g = run_pass(g)
    return g


def check_every_candidate(g: lm.Graph, feed: dict, what: str, rtol=1e-4, atol=1e-4) -> dict:
    """Each candidate on the interpreter and compiled, against the interpreter on `g`; returns the search report
    with the GEMM kernels of the "search" candidate."""
    want = lm.run(g, feed)
    found = search(_passes(g), "cpu", SearchOptions(isolate=False))
    for name, cand in found.candidates.items():
        _close(lm.run(cand, feed), want, f"{what}, candidate {name} on the interpreter", rtol, atol)
        kernels = kernel_program(cand, "cpu")
        exe = CpuExecutable(cand, kernels, c_source(kernels), cand.weight_data, plan=run_plan(kernels, "cpu"))
        _close(exe.run(feed), want, f"{what}, candidate {name} compiled", rtol, atol)
        if name == "search":
            found.report["gemm kernels"] = [k for k in kernels.kernels if codegen_gemm.plan(k) is not None]
    return found.report


def _gemms(prog) -> list:
    return [k for k in prog.kernels.kernels if codegen_gemm.plan(k) is not None]


def _weight(g, name, shape):
    t = g.weight(name, shape)
    g.bind({name: (RNG.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)})
    return t


@pytest.mark.parametrize("approximate", ["none", "tanh"])  # tanh: GPT-2's GELU, whose tanh has a series branch
def test_linear_bias_and_gelu_become_one_gemm_kernel(approximate):
    g = lm.Graph()
    x = g.input("x", (lm.sym("b", max=8), 20, 48))
    F.gelu(F.linear(x, _weight(g, "w", (40, 48)), _weight(g, "bias", (40,))), approximate=approximate).output("y")
    report = check_every_candidate(g, {"x": RNG.standard_normal((3, 20, 48)).astype(np.float32)}, "linear")
    assert report["rulesets"]["matmul"]["MatMul"] == 1
    prog = lm.compile(g, "cpu", cache=False)
    assert prog.report["choice"] == "search"
    assert len(prog.kernels.kernels) == 1 and len(_gemms(prog)) == 1  # bias and GELU are its epilogue
    assert prog.report["kernels"]["gemm_epilogue_ops"] > 5
    assert "lm_micro(" in prog.source and "lm_prepare" in prog.source  # B (the weight) packed at load
    assert "lm_k0 == 0, lm_pf)" in prog.source  # the next block of weights prefetched as this one multiplies


@pytest.mark.parametrize(
    "activation", [F.relu, F.hardswish, F.relu6, F.hardtanh, F.elu, F.softplus, F.selu, F.celu, F.leaky_relu]
)
def test_activations_stay_in_the_gemm_epilogue(activation):
    # maximum is a max over the two values it chooses from (unrolled: clamp's min of a max no longer nests two
    # reductions), where is a select (no stack stored and gathered from), and a GEMM's element read under
    # either is still the one accumulator (hardswish's copy under the max was recomputed as a dot product)
    g = lm.Graph()
    x = g.input("x", (lm.sym("b", max=8), 20, 48))
    activation(F.linear(x, _weight(g, "w", (40, 48)), _weight(g, "bias", (40,)))).output("y")
    feed = {"x": (RNG.standard_normal((3, 20, 48)) * 4).astype(np.float32)}
    check_every_candidate(g, feed, activation.__name__)
    prog = lm.compile(g, "cpu", cache=False)
    assert len(prog.kernels.kernels) == 1 and len(_gemms(prog)) == 1
    epilogue = codegen_gemm.plan(prog.kernels.kernels[0]).epilogue
    assert not any(isinstance(n, ir.Contract) for n in ir.walk(epilogue))
    _close(prog.run(feed), lm.run(g, feed), activation.__name__)


# (a shape, b shape, how to combine): sizes off the tile grid, several contraction blocks, batch axes,
# transposed and sliced operands, and a contraction of length 0.
CASES = [
    ((7, 300), (300, 33), lambda a, b: a @ b),
    ((2, 1), (1, 3), lambda a, b: a @ b),
    ((5, 97, 130), (130, 70), lambda a, b: a @ b),
    ((3, 2, 13, 17), (3, 2, 17, 29), lambda a, b: a @ b),
    ((40, 9), (21, 40), lambda a, b: a.permute(1, 0) @ b.permute(1, 0)),
    ((12, 30), (30, 50), lambda a, b: a[2:11:2, 3:27] @ b[3:27, ::3]),
    ((6, 0), (0, 5), lambda a, b: a @ b),
    ((4, 16, 8), (4, 16, 8), lambda a, b: F.scaled_dot_product_attention(a[None], b[None], b[None]) * 2),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_contractions_of_every_layout_match_the_interpreter(case):
    a_shape, b_shape, combine = CASES[case]
    g = lm.Graph()
    a, b = g.input("a", a_shape), g.input("b", b_shape)
    combine(a, b).output("y")
    feed = {"a": RNG.standard_normal(a_shape).astype(np.float32), "b": RNG.standard_normal(b_shape).astype(np.float32)}
    report = check_every_candidate(g, feed, f"case {case}")
    if 0 in a_shape:
        return  # an empty contraction: the passes have already made it zeros
    assert report["rulesets"]["matmul"]["MatMul"] >= 1
    # (which candidate lm.compile keeps is the cost model's call: tiny ones may lose; attention's two products
    # become one Attention kernel instead, tests/compiler/test_attention.py)
    assert report["gemm kernels"] or report["rulesets"]["attention"]["Attention"] == 1


def test_symbolic_batch_reuses_the_program_at_every_size():
    g = lm.Graph()
    x = g.input("x", (lm.sym("n", max=300), 64))
    (F.relu(x @ _weight(g, "w", (64, 64))) + x).output("y")
    prog = lm.compile(g, "cpu", cache=False)
    assert len(_gemms(prog)) == 1
    for n in (1, 95, 300, 2):
        feed = {"x": RNG.standard_normal((n, 64)).astype(np.float32)}
        _close(prog.run(feed), lm.run(g, feed), f"n={n}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32"])
def test_other_dtypes_keep_exact_loops(dtype):
    g = lm.Graph()
    a, b = g.input("a", (5, 7), dtype=dtype), g.input("b", (7, 3), dtype=dtype)
    (a @ b).output("y")
    np_dtype = lm.dtypes.dtype_of(dtype).np
    feed = {k: (RNG.standard_normal(s) * 4).astype(np_dtype) for k, s in (("a", (5, 7)), ("b", (7, 3)))}
    check_every_candidate(g, feed, dtype, rtol=1e-2, atol=1e-2)
    assert not _gemms(lm.compile(g, "cpu", cache=False))  # the GEMM path is float32 only


def test_dot_products_and_plain_sums_are_not_matmuls():
    g = lm.Graph()
    a, b = g.input("a", (6, 9)), g.input("b", (6, 9))
    (a * b).sum(-1).output("dot")
    (a.sum(0) * 2).output("sum")
    feed = {"a": RNG.standard_normal((6, 9)).astype(np.float32), "b": RNG.standard_normal((6, 9)).astype(np.float32)}
    report = check_every_candidate(g, feed, "dot")
    assert report["rulesets"]["matmul"]["MatMul"] == 0


@pytest.mark.parametrize("seed", range(0, 60, 3))
def test_every_candidate_of_random_graphs_matches_the_interpreter(seed):
    g, feed = random_graph(seed)
    check_every_candidate(g, feed, f"seed {seed}", rtol=2e-5, atol=2e-6)


def test_profile_times_the_candidates_and_keeps_the_fastest():
    g = lm.Graph()
    x = g.input("x", (lm.sym("b", max=4), 32, 64))
    F.linear(x, _weight(g, "w", (64, 64))).output("y")
    prog = lm.compile(g, "cpu", cache=False, profile=True, profile_dims={"b": 2})
    rows = prog.report["candidates"]
    timed = {r["name"]: r["seconds"]["measured_median"] for r in rows if "seconds" in r}
    assert len(timed) >= 2 and prog.report["choice"] == min(timed, key=timed.get)
    feed = {"x": RNG.standard_normal((2, 32, 64)).astype(np.float32)}
    _close(prog.run(feed), lm.run(g, feed), "profiled")


def test_unknown_compile_options_are_named():
    g = lm.Graph()
    g.input("x", (2,)).output("y")
    with pytest.raises(TypeError, match="profil"):
        lm.compile(g, "cpu", profil=True)


def test_every_layer_of_a_deep_residual_stack_keeps_its_gemms():
    # Tree costs grow ~10x per residual layer until float rounding hides the MatMul's advantage (it did from
    # layer 4 of MiniLM); the longest-path cost keeps every layer's choice.
    g = lm.Graph()
    x = g.input("x", (16, 32))
    for i in range(10):
        h = F.layer_norm(x, (32,))
        x = x + F.linear(F.gelu(F.linear(h, _weight(g, f"up{i}", (64, 32)))), _weight(g, f"down{i}", (32, 64)))
    x.output("y")
    report = check_every_candidate(g, {"x": RNG.standard_normal((16, 32)).astype(np.float32)}, "deep")
    assert report["rulesets"]["matmul"]["MatMul"] == 20
    assert len(report["gemm kernels"]) == 20
