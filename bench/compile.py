"""Compiled CPU time next to the reference interpreter and PyTorch eager, on the same block, in one run.

    .venv/bin/python bench/compile.py

Today's compiled program is the unfused baseline (one C kernel per primitive node, views folded into loads);
the search-driven fusion and GEMM kernels of the compiler issue are measured against these figures.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blocks import BlockConfig, block_weights, luminal_block, torch_block  # noqa: E402
from timing import median_ms  # noqa: E402

import luminal as lm  # noqa: E402


def main() -> None:
    import torch

    torch.set_num_threads(2)
    cfg = BlockConfig()
    weights = block_weights(cfg)
    graph = luminal_block(cfg, weights)
    forward = torch_block(cfg, weights)
    start = time.perf_counter()
    prog = lm.compile(graph, target="cpu")
    compile_s = time.perf_counter() - start
    print(f"transformer block dim {cfg.dim}, heads {cfg.heads}, ffn {cfg.ffn}, seq {cfg.seq}: {len(graph.nodes)} nodes")
    print(f"compile (passes, lowering, C codegen): {compile_s:.2f} s -> {len(prog.kernels.kernels)} kernels")
    print(
        f"{'batch':>5} {'compiled ms':>12} {'reference ms':>13} {'torch ms':>9} "
        f"{'ref/compiled':>13} {'compiled/torch':>15}"
    )
    for batch in (1, 8):
        x = np.random.default_rng(batch).standard_normal((batch, cfg.seq, cfg.dim)).astype(np.float32)
        with torch.inference_mode():
            want = forward(torch.from_numpy(x)).numpy()
            np.testing.assert_allclose(prog.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
            compiled = median_ms(lambda x=x: prog.run({"x": x}), repeats=10, warmup=2)
            reference = median_ms(lambda x=x: lm.run(graph, {"x": x}), repeats=5, warmup=1)
            eager = median_ms(lambda x=x: forward(torch.from_numpy(x)), repeats=50, warmup=5)
        print(
            f"{batch:>5} {compiled:>12.2f} {reference:>13.2f} {eager:>9.3f} "
            f"{reference / compiled:>12.1f}x {compiled / eager:>14.1f}x"
        )


if __name__ == "__main__":
    main()
