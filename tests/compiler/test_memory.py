"""The memory plan: lifetimes, no overlap between buffers live at once, reuse, and the runtime's planned arena."""

import numpy as np

import luminal as lm
import luminal.functional as F
from luminal import dtypes as dt
from luminal.compiler.analysis import memory
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.lower import lower
from luminal.runtime.reference import bind_symbols
from luminal.symbolic import const, var
from tests.graph_fuzz import random_graph


def _chain() -> ir.KernelProgram:
    """x -> t1 -> t2 -> t3 (output), every buffer 100 float32: t1 is dead once t2 is written."""
    p = ir.KernelProgram()
    for name, role in [("x", "input"), ("t1", "temp"), ("t2", "temp"), ("t3", "temp")]:
        p.buffers[name] = ir.Buffer(name, dt.float32, const(100), role)
    p.inputs["x"] = "x"
    for k, (src, out) in enumerate([("x", "t1"), ("t1", "t2"), ("t2", "t3")]):
        body = ir.Apply("Sin", (ir.Load(src, var("_i0", 0, 99), dt.float32),), dt.float32)
        p.kernels.append(ir.LoopKernel(f"k{k}", out, (const(100),), body))
    p.outputs["y"] = ("t3", (const(100),))
    return p


def _check_plan(program: ir.KernelProgram, plan: memory.MemoryPlan, what: str) -> None:
    """Every pair of buffers live at the same kernel occupies disjoint bytes, and a kernel never reads its output's."""

    def span(name):
        return plan.offsets[name], plan.offsets[name] + plan.sizes[name]

    def disjoint(a, b):
        (a0, a1), (b0, b1) = span(a), span(b)
        return a1 <= b0 or b1 <= a0

    names = sorted(plan.offsets)
    for name in names:
        assert plan.offsets[name] % memory.ALIGN == 0 and span(name)[1] <= plan.arena_bytes, f"{what}: {name}"
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if plan.lifetimes[a].overlaps(plan.lifetimes[b]):
                assert disjoint(a, b), f"{what}: live together but overlapping: {a} {span(a)}, {b} {span(b)}"
    end = len(program.kernels) - 1
    for pos, k in enumerate(program.kernels):  # the spans themselves cover every use (checked independently)
        for name in (ir.buffers_read(k) | {k.out}) & plan.offsets.keys():
            assert plan.lifetimes[name].first <= pos <= plan.lifetimes[name].last, f"{what}: {name} at {pos}"
        for src in ir.buffers_read(k) & plan.offsets.keys():
            assert disjoint(k.out, src), f"{what}: kernel {k.name} writes {k.out} over its input {src}"
    for buf, _ in program.outputs.values():
        assert buf not in plan.offsets or plan.lifetimes[buf].last == end, f"{what}: output {buf} dies early"
    assert plan.arena_bytes <= plan.naive_bytes, what


def _block() -> tuple[lm.Graph, dict[str, np.ndarray]]:
    """Pre-norm attention then an MLP, with symbolic batch and sequence."""
    g = lm.Graph()
    b, s, d = lm.sym("b", max=4), lm.sym("s", max=32), 16
    x = g.input("x", (b, s, d))
    wqkv, w1, w2 = g.weight("wqkv", (3 * d, d)), g.weight("w1", (4 * d, d)), g.weight("w2", (d, 4 * d))
    q, k, v = F.linear(F.layer_norm(x, (d,)), wqkv).reshape(b, s, 3, 2, 8).permute(2, 0, 3, 1, 4)
    h = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
    (h + F.linear(F.gelu(F.linear(F.layer_norm(h, (d,)), w1)), w2)).output("y")
    rng = np.random.default_rng(0)
    g.bind(
        {n: (rng.standard_normal(w.shape) / 4).astype(np.float32) for n, w in [("wqkv", wqkv), ("w1", w1), ("w2", w2)]}
    )
    return g, {"x": rng.standard_normal((2, 7, d)).astype(np.float32)}


def _assert_close(got, want, what):
    assert got.keys() == want.keys(), what
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-6, equal_nan=True, err_msg=f"{what}: {k}")


def test_lifetimes_and_reuse_on_a_chain():
    p = _chain()
    plan = memory.plan(p, {})
    # closed spans: t2 is written at kernel 1 while t1 is read there; the output t3 lives to the end
    assert plan.lifetimes == {"t1": memory.Lifetime(0, 1), "t2": memory.Lifetime(1, 2), "t3": memory.Lifetime(2, 2)}
    assert plan.offsets["t1"] == plan.offsets["t3"] != plan.offsets["t2"]  # t1 is dead when t3 is written
    assert plan.naive_bytes == 3 * 448 and plan.arena_bytes == 2 * 448  # 400 bytes each, aligned up to 64
    _check_plan(p, plan, "chain")


def test_random_graphs_never_overlap_live_buffers():
    reused = 0
    for seed in range(100):
        g, feed = random_graph(seed)
        plans = []
        for kernels in (lower(g), lm.compile(g, "cpu").kernels):  # unfused (many buffers) and as compiled
            plans.append(memory.plan(kernels, bind_symbols(g, feed, None)))
            _check_plan(kernels, plans[-1], f"seed {seed}")
            _check_plan(kernels, memory.upper_bound_plan(kernels), f"seed {seed} (bound)")
        reused += plans[0].arena_bytes < plans[0].naive_bytes
    assert reused > 10  # the fuzz graphs are small, but many still free a buffer before the end


def test_compiled_random_graphs_match_with_the_planned_arena():
    # every 4th seed keeps the file fast with a cold C cache; test_cpu_runtime.py runs 60 more through the arena
    for seed in range(0, 100, 4):
        g, feed = random_graph(seed)
        prog = lm.compile(g, "cpu")
        _assert_close(prog.run(feed), lm.run(g, feed), f"seed {seed}")
        _assert_close(prog.run(feed), lm.run(g, feed), f"seed {seed}, second run in the same arena")
        assert prog._executable.plans, "the runtime planned its arena"


def test_transformer_block_reuses_memory_and_still_matches():
    g, feed = _block()
    prog = lm.compile(g, "cpu")
    plan = memory.plan(prog.kernels, {"b": 2, "s": 7})
    _check_plan(prog.kernels, plan, "block")
    bound = memory.upper_bound_plan(prog.kernels)
    _check_plan(prog.kernels, bound, "block (bound)")
    print(f"\nblock b=2 s=7: arena {plan.arena_bytes} B, naive {plan.naive_bytes} B")
    print(f"block at symbol maxima: arena {bound.arena_bytes} B, naive {bound.naive_bytes} B")
    assert plan.arena_bytes < plan.naive_bytes
    unfused = memory.plan(lower(g), {"b": 2, "s": 7})  # one buffer per node: where reuse matters most
    assert unfused.arena_bytes < unfused.naive_bytes / 2
    assert memory.describe(prog.kernels, {"b": 2, "s": 7})["arena_bytes"] == plan.arena_bytes
    assert memory.describe(prog.kernels)["arena_bytes"] == bound.arena_bytes
    for x in [feed["x"], feed["x"][:1, :3], feed["x"]]:  # a new binding gets its own arena; the first is reused
        _assert_close(prog.run({"x": x}), lm.run(g, {"x": x}), f"shape {x.shape}")
    assert len(prog._executable.plans) == 2
