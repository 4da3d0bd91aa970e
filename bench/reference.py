"""The reference interpreter's time on a small transformer block next to PyTorch eager on the same block.

    .venv/bin/python bench/reference.py

The ratio (reference / torch) is the baseline the compiler is measured against. Both run on this machine's
CPU, in this process, on the same weights and inputs; the outputs are compared before timing.
"""

from __future__ import annotations

import sys
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
    print(
        f"transformer block: dim {cfg.dim}, heads {cfg.heads}, ffn {cfg.ffn}, seq {cfg.seq}; {len(graph.nodes)} nodes"
    )
    print(f"{'batch':>5} {'reference ms':>13} {'torch eager ms':>15} {'ratio':>8}")
    for batch in (1, 8):
        x = np.random.default_rng(batch).standard_normal((batch, cfg.seq, cfg.dim)).astype(np.float32)
        with torch.inference_mode():
            want = forward(torch.from_numpy(x)).numpy()
            got = lm.run(graph, {"x": x})["y"]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            ref_ms = median_ms(lambda x=x: lm.run(graph, {"x": x}), repeats=5, warmup=1)
            torch_ms = median_ms(lambda x=x: forward(torch.from_numpy(x)), repeats=50, warmup=5)
        print(f"{batch:>5} {ref_ms:>13.2f} {torch_ms:>15.3f} {ref_ms / torch_ms:>7.1f}x")


if __name__ == "__main__":
    main()
