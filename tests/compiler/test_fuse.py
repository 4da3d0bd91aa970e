"""Kernel fusion by inlining: fewer kernels, the same results, and no reduction recomputed per element."""

import numpy as np

import luminal as lm
from luminal.compiler.analysis.cost import estimate
from luminal.compiler.analysis.targets import get_target
from luminal.compiler.fusion.fuse import fuse_single_consumers
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.lower import lower


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


def _flops(program) -> int:
    return sum(estimate(k, program.buffers, "cpu").flops for k in program.kernels)


def test_a_broadcast_reduction_is_not_recomputed_per_element():
    g = lm.Graph()
    x = g.input("x", (4, 256))
    x.softmax(-1).output("y")
    unfused = lower(g)
    fused = fuse_single_consumers(unfused, get_target("cpu"))
    # The row max and the row sum are read by all 256 elements of a row: fused into their readers they are
    # hoisted out of the row's loop (compiler/kernels/hoist.py). Fusion may recompute an element-wise value (exp) to
    # save its buffer, never a reduction per element (that would be 256 times the arithmetic).
    assert len(fused.kernels) < len(unfused.kernels)
    assert _flops(fused) < 2 * _flops(unfused)
    xs = np.random.default_rng(2).standard_normal((4, 256)).astype(np.float32)
    np.testing.assert_allclose(lm.compile(g).run({"x": xs})["y"], lm.run(g, {"x": xs})["y"], rtol=1e-5)


def test_layer_norm_is_one_pass_over_rows():
    g = lm.Graph()
    x, w, b = g.input("x", (lm.sym("rows", max=64), 48)), g.weight("w", (48,)), g.weight("b", (48,))
    lm.functional.layer_norm(x, (48,), w, b).output("y")
    rng = np.random.default_rng(3)
    g.bind({"w": rng.standard_normal(48).astype(np.float32), "b": rng.standard_normal(48).astype(np.float32)})
    program = lm.compile(g, cache=False)
    assert len(program.kernels.kernels) == 1  # mean and variance hoisted into the kernel that normalises
    assert _flops(program.kernels) < 30 * 64 * 48  # per row, not per element: that would be 64 * 48 * 48 more
    for rows in (1, 37):
        xs = rng.standard_normal((rows, 48)).astype(np.float32) * 3 + 1
        np.testing.assert_allclose(program.run({"x": xs})["y"], lm.run(g, {"x": xs})["y"], rtol=1e-5, atol=1e-5)


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
    from luminal.compiler.cpu import codegen_gemm

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


def _divisions(e) -> list:
    """The div/mod nodes of an index expression."""
    found = [e] if e.op in ("div", "mod") else []
    return found + [d for a in e.args if isinstance(a, lm.symbolic.Expr) for d in _divisions(a)]


def _index_expressions(kernel) -> list:
    found = []
    for n in ir.walk(kernel.body):
        if isinstance(n, ir.Load):
            found.append(n.index)
        elif isinstance(n, ir.GatherLoad):
            found += [n.index, n.valid]
    return found


def test_a_gather_concatenated_with_a_row_reads_by_its_own_axes():
    # The paged KV cache's read: rows of a pool gathered by a table, followed by the step's own row. The
    # concatenation reads the gather under `_i0 < rows`: its axes match the gather's (no division by the symbolic
    # extent), and the pool, read whole, is read at the gathered position itself (no division at all).
    g = lm.Graph()
    rows, blocks = lm.sym("rows", max=32), lm.sym("blocks", max=64)
    pool, table = g.input("pool", (blocks, 2, 8)), g.input("table", (1, rows, 1), lm.int64)
    new = g.input("new", (2, 1, 8))
    within = lm.hl.prim.iota(g, lm.view.idx(0, 2) * 8 + lm.view.idx(2, 8), (2, rows, 8))
    reads = lm.hl.prim.broadcast_to(table, (2, rows, 8)) * 16 + within
    lm.hl.combine.cat([lm.hl.prim.gather(pool, reads), new], dim=1).output("y")
    fused = fuse_single_consumers(lower(g), get_target("cpu"))
    indexes = [e for k in fused.kernels for e in _index_expressions(k)]
    assert not [d for e in indexes for d in _divisions(e) if d.args[1].symbols()]
    gathers = [n for k in fused.kernels for n in ir.walk(k.body) if isinstance(n, ir.GatherLoad)]
    assert gathers and all(not _divisions(n.index) for n in gathers)
    rng = np.random.default_rng(4)
    feeds = {
        "pool": rng.standard_normal((9, 2, 8)).astype(np.float32),
        "table": rng.integers(0, 9, (1, 5, 1)).astype(np.int64),
        "new": rng.standard_normal((2, 1, 8)).astype(np.float32),
    }
    np.testing.assert_array_equal(lm.compile(g, cache=False).run(feeds)["y"], lm.run(g, feeds)["y"])


def _positions_read(kernel) -> dict[str, int]:
    positions: dict[str, set] = {}
    for n in ir.walk(kernel.body):
        if isinstance(n, ir.Load):
            positions.setdefault(n.buffer, set()).add(n.index)
    return {buffer: len(p) for buffer, p in positions.items()}


def test_a_long_scan_is_not_fused_into_straight_line_sums():
    """A cumsum over up to 4096 rows takes 12 doubling steps; fused without a bound they became one kernel summing
    a thousand loads in straight-line code (121 KB of CUDA). Each kernel reads a buffer at most at
    MAX_READS_PER_BUFFER positions, and the program still computes the scan."""
    from luminal.compiler.fusion.limits import MAX_READS_PER_BUFFER

    g = lm.Graph()
    g.input("x", (lm.sym("n", max=4096), 2)).cumsum(0).output("y")
    programs = {target: lm.compile(g, target=target, cache=False) for target in ("cpu", "h100")}
    for target, program in programs.items():
        kernels = [k for k in program.kernels.kernels if isinstance(k, ir.LoopKernel)]
        reads = [count for k in kernels for count in _positions_read(k).values()]
        assert max(reads) <= MAX_READS_PER_BUFFER, (target, reads)
        assert len(program.kernels.kernels) <= 4, target  # still fused: 12 steps in a few kernels
    xs = np.random.default_rng(4).standard_normal((300, 2)).astype(np.float32)
    np.testing.assert_allclose(programs["cpu"].run({"x": xs})["y"], np.cumsum(xs, 0), rtol=1e-5, atol=1e-4)
