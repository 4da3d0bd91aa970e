"""The roofline cost model counts FLOPs and bytes as documented, and ranks targets and sizes sensibly."""

from dataclasses import replace

import numpy as np
import pytest

import luminal as lm
from luminal import dtypes
from luminal.compiler.analysis import gemv_plan
from luminal.compiler.analysis.cost import OP_FLOPS, estimate, estimate_program
from luminal.compiler.analysis.targets import TARGETS, Target, get_target
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.lower import lower
from luminal.symbolic import const, var


def _elementwise():
    """o = exp2(x * y): two kernels over (n, 8) float32, n a symbol up to 1000."""
    g = lm.Graph()
    n = lm.sym("n", max=1000)
    x, y = g.input("x", (n, 8)), g.input("y", (n, 8))
    (x * y).exp2().output("o")
    return lower(g)


def _matmul(m=4, k=3, n=5):
    g = lm.Graph()
    a = g.input("a", (m, k))
    b = g.weight("b", (k, n))
    (a @ b).output("c")
    return lower(g)


def test_elementwise_counts_by_hand():
    p = _elementwise()
    cost = estimate_program(p, "cpu", {"n": 4})  # 32 elements of float32
    mul, exp2 = cost.kernels
    # Mul: 32 FLOPs; reads x and y (32 elements each, 4 bytes), writes 32 elements.
    assert (mul.flops, mul.bytes_read, mul.bytes_written) == (32, 256, 128)
    # Exp2: a transcendental at its documented weight; reads the product once.
    assert (exp2.flops, exp2.bytes_read, exp2.bytes_written) == (32 * OP_FLOPS["Exp2"], 128, 128)
    cpu = get_target("cpu")
    want = max(384 / cpu.memory_bandwidth, 32 / cpu.peak_flops) + cpu.launch_overhead_s
    assert mul.seconds == pytest.approx(want)
    assert cost.seconds == pytest.approx(mul.seconds + exp2.seconds)
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (32 + 128, 384, 256)


def test_kernels_launched_together_pay_one_launch():
    p = _elementwise()
    alone, together = (
        estimate_program(p, "h100", {"n": 4}, groups) for groups in ((), [tuple(k.name for k in p.kernels)])
    )
    assert (alone.launches, together.launches) == (2, 1)
    assert alone.seconds - together.seconds == pytest.approx(get_target("h100").launch_overhead_s)


def test_a_gpu_gemv_computes_its_normed_vector_once_per_row_not_per_output():
    g = lm.Graph()
    x, w = g.input("x", (1, 256)), g.weight("w", (512, 256))
    normed = x * ((x * x).mean(-1, keepdim=True) + 1e-5).sqrt().reciprocal()
    (normed @ w.t()).output("y")
    g.bind({"w": np.zeros((512, 256), np.float32)})
    p = lm.compile(g, "h100", cache=False).kernels
    (gemv,) = [k for k in p.kernels if gemv_plan.plan(k) is not None and gemv_plan.plan(k).statistics]
    h100 = get_target("h100")
    staged, per_output = (estimate(gemv, p.buffers, t) for t in (h100, replace(h100, stages_gemv_vectors=False)))
    assert staged.bytes == per_output.bytes and staged.flops < per_output.flops / 4


def test_unbound_symbols_take_the_top_of_their_range():
    p = _elementwise()
    assert estimate_program(p, "cpu").kernels[0].bytes_written == 1000 * 8 * 4
    assert estimate_program(p, "cpu", {}).kernels[0].bytes_written == 1000 * 8 * 4


def test_lowered_matmul_counts_by_hand():
    m, k, n = 4, 3, 5
    mul, red = estimate_program(_matmul(m, k, n), "h100").kernels
    # The broadcast multiply iterates (m, n, k): each a[i, j] is read n times, but a's 12 elements cross the
    # bus once; likewise b's 15.
    assert (mul.flops, mul.bytes_read, mul.bytes_written) == (m * n * k, (m * k + k * n) * 4, m * n * k * 4)
    # The reduce folds k products per output: one add per product.
    assert (red.flops, red.bytes_read, red.bytes_written) == (m * n * k, m * n * k * 4, m * n * 4)


def test_fused_matmul_reduce_counts_two_flops_per_multiply_accumulate():
    m, k, n = 4, 3, 5
    f32 = dtypes.float32
    r = var("_r0", 0, k - 1)
    i0, i1 = var("_i0", 0, m - 1), var("_i1", 0, n - 1)
    body = ir.Apply("Mul", (ir.Load("a", i0 * k + r, f32), ir.Load("b", r * n + i1, f32)), f32)
    kernel = ir.LoopKernel("gemm", "c", (const(m), const(n)), ir.Reduce("sum", "_r0", const(k), body, f32))
    buffers = {name: ir.Buffer(name, f32, const(s), "temp") for name, s in (("a", m * k), ("b", k * n), ("c", m * n))}
    cost = estimate(kernel, buffers, "a100")
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (2 * m * n * k, (m * k + k * n) * 4, m * n * 4)
    assert cost.arithmetic_intensity == pytest.approx(120 / 188)


def test_more_elements_cost_more():
    p = _elementwise()
    for name in ("cpu", "h100", "m2"):
        times = [estimate_program(p, name, {"n": n}).seconds for n in (1, 1000, 10**6, 10**8)]
        assert times == sorted(times) and times[0] < times[-1], name


def test_the_same_program_ranks_faster_on_h100_than_on_cpu():
    for p, env in ((_elementwise(), {"n": 4096}), (_matmul(64, 128, 64), None)):
        assert estimate_program(p, "h100", env).seconds < estimate_program(p, "cpu", env).seconds


def test_unfused_matmul_is_bound_by_its_intermediate():
    # The broadcast multiply writes an (m, n, k) product: memory, not arithmetic, is its roof on every target.
    mul = estimate_program(_matmul(256, 256, 256), "cpu").kernels[0]
    cpu = get_target("cpu")
    assert mul.bytes / cpu.memory_bandwidth > mul.flops / cpu.peak_flops
    assert mul.seconds == pytest.approx(mul.bytes / cpu.memory_bandwidth + cpu.launch_overhead_s)


def test_get_target_errors_name_the_valid_targets():
    with pytest.raises(ValueError, match="unknown target 'v100'.*h100.*m2"):
        get_target("v100")
    with pytest.raises(ValueError, match="valid targets"):
        get_target(None)
    assert get_target(TARGETS["t4"]) is TARGETS["t4"]
    with pytest.raises(ValueError, match="kind"):
        Target("x", "tpu", 1, 1, 1, 1, 1, 1, 0, 1)


def test_every_target_has_positive_figures():
    assert {"cpu", "h100", "h200", "a100", "l4", "t4", "m2"} <= set(TARGETS)
    for name, t in TARGETS.items():
        assert t.name == name and t.kind in ("cpu", "cuda", "metal")
        figures = (t.memory_bandwidth, t.peak_flops, t.peak_flops_fp16, t.peak_flops_bf16, t.sm_count)
        assert all(f > 0 for f in figures + (t.shared_memory_per_block, t.launch_overhead_s, t.memory_bytes)), name
        assert t.peak_flops_fp16 >= t.peak_flops and t.peak_flops_bf16 >= t.peak_flops, name
        assert t.peak_for(dtypes.float16, matrix_units=True) == t.peak_flops_fp16
        assert t.peak_for(dtypes.float16) == t.peak_flops
    assert TARGETS["h200"].memory_bandwidth > TARGETS["h100"].memory_bandwidth > TARGETS["a100"].memory_bandwidth


def _scatter(dest: str) -> tuple[ir.ScatterKernel, dict[str, ir.Buffer]]:
    """out "pool" (4096 float32) = `dest`, then three values of "src" written at the positions "at" holds."""
    i, j = var("_i0", 0, 2), var("_i0", 0, 4095)
    kernel = ir.ScatterKernel(
        "k0", "pool", (const(4096),), ir.Load(dest, j, dtypes.float32), (const(3),),
        ir.Load("at", i, dtypes.int64), ir.Load("src", i, dtypes.float32), const(4096),
    )  # fmt: skip
    names = {"pool": dtypes.float32, "fresh": dtypes.float32, "at": dtypes.int64, "src": dtypes.float32}
    return kernel, {n: ir.Buffer(n, d, const(4096 if n in ("pool", "fresh") else 3), "temp") for n, d in names.items()}


def test_a_scatter_in_place_costs_the_positions_it_writes_not_its_destination():
    in_place = estimate(*_scatter("pool"), "h100")
    assert (in_place.bytes_read, in_place.bytes_written) == (3 * 8 + 3 * 4, 3 * 4)
    copied = estimate(*_scatter("fresh"), "h100")  # the destination copied from another buffer first
    assert (copied.bytes_read, copied.bytes_written) == (3 * 8 + 3 * 4 + 4096 * 4, 4096 * 4)
