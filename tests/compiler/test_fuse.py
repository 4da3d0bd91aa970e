"""Kernel fusion by inlining: fewer kernels, the same results, and no reduction recomputed per element."""

import numpy as np

import luminal as lm
from luminal.compiler import ir
from luminal.compiler.fuse import fuse_single_consumers
from luminal.compiler.lower import lower
from luminal.compiler.targets import get_target


def _reductions(kernel) -> int:
    return sum(isinstance(n, ir.Reduce) for n in ir.walk(kernel.body))


def test_matmul_becomes_one_kernel_without_the_product_buffer():
    g = lm.Graph()
    x, w = g.input("x", (lm.sym("n", max=64), 8)), g.weight("w", (8, 5))
    (x @ w).output("y")
    g.bind({"w": np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)})
    fused = fuse_single_consumers(lower(g), get_target("cpu"))
    assert len(fused.kernels) == 1 and _reductions(fused.kernels[0]) == 1  # expand*mul inlined into the sum
    xs = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(lm.compile(g).run({"x": xs})["y"], lm.run(g, {"x": xs})["y"], rtol=1e-5)


def test_a_broadcast_reduction_is_not_recomputed_per_element():
    g = lm.Graph()
    x = g.input("x", (4, 16))
    x.softmax(-1).output("y")
    fused = fuse_single_consumers(lower(g), get_target("cpu"))
    # The row max and the row sum are each read by all 16 elements of a row: they stay kernels of their own,
    # so no kernel nests one reduction inside another.
    assert all(_reductions(k) <= 1 for k in fused.kernels)
    assert sum(_reductions(k) for k in fused.kernels) == 2
    xs = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(lm.compile(g).run({"x": xs})["y"], lm.run(g, {"x": xs})["y"], rtol=1e-5)


def test_padded_reads_of_a_fused_gather_stay_in_bounds():
    g = lm.Graph()
    table, ids = g.weight("table", (5, 3)), g.input("ids", (4,), dtype=lm.int64)
    e = lm.functional.embedding(ids, table)  # a gather kernel, inlined into the padded read below
    (e.with_view(e.st.pad([(2, 1), (0, 0)])) * 2).output("y")
    g.bind({"table": np.arange(15, dtype=np.float32).reshape(5, 3)})
    prog = lm.compile(g)
    assert len(prog.kernels.kernels) == 1  # the gather's statements now sit inside the padding guard
    feed = {"ids": np.array([4, 0, 2, 1])}
    np.testing.assert_array_equal(prog.run(feed)["y"], lm.run(g, feed)["y"])


def test_symbolic_batch_and_sequence_keep_a_fused_linear_a_gemm():
    """A GEMM whose input was fused from an element-wise producer over [batch, seq, d], both symbolic: the
    producer's axes are read straight off the consumer's loop variables. Through the flat position they came
    out as (d * s + c) // (d * seq), which no simplifier reduces (it needs s < seq), and the GEMM's operand
    then seemed to read an output column: it ran as a scalar loop."""
    import luminal.functional as F
    from luminal.compiler import codegen_gemm

    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", max=4), lm.sym("seq", max=64), 24))
    w, b = g.weight("w", (40, 24)), g.weight("b", (40,))
    rng = np.random.default_rng(1)
    g.bind({"w": rng.standard_normal((40, 24)).astype(np.float32), "b": rng.standard_normal(40).astype(np.float32)})
    F.linear(F.gelu(x * 2.0 + 1.0), w, b).output("y")
    prog = lm.compile(g, "cpu", cache=False)
    assert sum(codegen_gemm.plan(k) is not None for k in prog.kernels.kernels) == 1
    feed = {"x": rng.standard_normal((3, 17, 24)).astype(np.float32)}
    np.testing.assert_allclose(prog.run(feed)["y"], lm.run(g, feed)["y"], rtol=1e-4, atol=1e-4)
