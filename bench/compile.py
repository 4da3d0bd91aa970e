"""Compiled CPU time next to the reference interpreter and PyTorch eager, per model, measured in one run.

    .venv/bin/python bench/compile.py [--compile-only]

Models: an MLP, a transformer encoder block and a 6-layer MiniLM-shaped encoder (dim 384, 12 heads, ffn 1536),
sequence 128, batch 1 and 8. Outputs are compared with torch before timing; medians of repeated runs. The
interpreter row is skipped where its materialised matmul products would not fit comfortably in memory.
Also printed: compile time (passes, search, candidates, C generation; the C build is cached and happens at
the first run), e-graph sizes, what the matmul rules found, the candidates' estimated costs, the GEMM
kernels and their fused epilogues, and the planned arena against the naive sum of buffers. Last, a 12-layer
encoder's cold compile time and its cached compile time (alone with --compile-only).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blocks import (  # noqa: E402
    MINILM,
    MLP,
    BlockConfig,
    block_weights,
    luminal_block,
    luminal_mlp,
    mlp_weights,
    torch_block,
    torch_mlp,
)
from timing import median_ms  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.compiler import memory  # noqa: E402

REFERENCE_LIMIT_BYTES = 2 * 2**30  # the interpreter materialises [batch, seq, out, in] products


def models():
    block = BlockConfig(dim=128, heads=4, ffn=512, seq=128)
    w = mlp_weights(MLP)
    yield "mlp 256-1024-256", MLP, luminal_mlp(MLP, w), torch_mlp(MLP, w)
    w = block_weights(block)
    yield "encoder block d128", block, luminal_block(block, w), torch_block(block, w)
    w = block_weights(MINILM)
    yield "minilm-shaped x6", MINILM, luminal_block(MINILM, w, layers=6), torch_block(MINILM, w, layers=6)


def main() -> None:
    import torch

    torch.set_num_threads(2)
    header = f"{'model':<20} {'batch':>5} {'compiled ms':>12} {'reference ms':>13} {'torch ms':>9}"
    print(header + f" {'ref/comp':>9} {'comp/torch':>11}")
    for name, cfg, graph, forward in models():
        start = time.perf_counter()
        prog = lm.compile(graph, target="cpu")
        compile_s = time.perf_counter() - start
        stages = {s["stage"]: s for s in prog.report["stages"]}
        found = stages["search"]
        kernels = prog.report["kernels"]
        estimated = {c["name"]: c["estimated_s"] * 1e3 for c in prog.report["candidates"]}
        print(
            f"{name}: compile {compile_s:.2f} s (search {found['seconds']['total']:.2f} s, "
            f"isolated={found['isolated']}), "
            f"e-graph {found['egraph_nodes'][0]} -> {found['egraph_nodes'][-1]} e-nodes in {found['iterations']} "
            f"iterations ({found['stop']}), matmul rules found {found['rulesets']['matmul']['MatMul']} MatMuls; "
            f"chosen {prog.report['choice']!r} of estimated "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in estimated.items())
            + f"; {kernels['kernels']} kernels, {kernels['gemm']} GEMMs with {kernels['gemm_epilogue_ops']} fused "
            "epilogue ops"
        )
        for batch in (1, 8):
            x = np.random.default_rng(batch).standard_normal((batch, cfg.seq, cfg.dim)).astype(np.float32)
            with torch.inference_mode():
                want = forward(torch.from_numpy(x)).numpy()
                got = prog.run({"x": x})["y"]
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
                compiled = median_ms(lambda x=x, p=prog: p.run({"x": x}), repeats=10, warmup=1)
                eager = median_ms(lambda x=x, f=forward: f(torch.from_numpy(x)), repeats=20, warmup=3)
            product = batch * cfg.seq * max(cfg.ffn, 3 * cfg.dim) * cfg.dim * 4
            if product <= REFERENCE_LIMIT_BYTES:
                reference = median_ms(lambda x=x, g=graph: lm.run(g, {"x": x}), repeats=3, warmup=0, budget_s=30)
                ref_text, ratio = f"{reference:13.1f}", f"{reference / compiled:8.1f}x"
            else:
                ref_text, ratio = f"{'skipped':>13}", f"{'-':>9}"
            print(
                f"{name:<20} {batch:>5} {compiled:>12.2f} {ref_text} {eager:>9.2f} {ratio} {compiled / eager:>10.1f}x"
            )
            plan = memory.plan(prog.kernels, {"batch": batch})
            print(f"{'':<20} arena {plan.arena_bytes / 2**20:.1f} MiB vs naive {plan.naive_bytes / 2**20:.1f} MiB")


def compile_times() -> None:
    """The issue's compile goals: a 12-layer encoder compiled cold (under 20 s), then again from the cache (0.2 s)."""
    import os
    import tempfile

    graph = luminal_block(MINILM, block_weights(MINILM), layers=12)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LUMINAL_CACHE_DIR"] = cache  # an empty cache: the first compile is cold
        start = time.perf_counter()
        prog = lm.compile(graph, target="cpu")
        cold = time.perf_counter() - start
        start = time.perf_counter()
        again = lm.compile(graph, target="cpu")
        cached = time.perf_counter() - start
    found = {s["stage"]: s for s in prog.report["stages"]}["search"]
    print(
        f"minilm-shaped x12: compile {cold:.2f} s (search {found['seconds']['total']:.2f} s, e-graph "
        f"{found['egraph_nodes'][0]} -> {found['egraph_nodes'][-1]} e-nodes, "
        f"{found['rulesets']['matmul']['MatMul']} MatMuls, {prog.report['kernels']['gemm']} GEMM kernels); "
        f"cached compile {cached:.2f} s (hit={again.report['cache']['hit']})"
    )


if __name__ == "__main__":
    if "--compile-only" not in sys.argv:
        main()
    compile_times()
