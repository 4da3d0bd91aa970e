"""Where one compiled paged decode step's time goes, kernel by kernel, on the CPU: the step's generated C with a
clock around every kernel call in `lm_run`, each call's minimum over the repeats (a loaded machine only adds
time, so the minimum is the nearest to a quiet run), summed by kernel function, beside the wall time of the
whole step and this machine's read bandwidth (numpy summing a buffer as large as the float32 weights).

The same random-weight Llama as bench/llm.py (default 125M: 12 layers, hidden 768, vocab 32000) at `--rows` rows
of `--past` cached positions, float32 or (`--quantize int8`) with Q8_0 projections, or (`--quantize w8a8`) with
Q8_0 projections whose input rows are quantised too (int8 x int8). `python bench/step_kernels.py [--layers N]
[--hidden N] [--rows N] [--past N] [--repeats N] [--quantize int8|w8a8]`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from kernel_clock import timed_executable  # noqa: E402
from llm import write_folder  # noqa: E402
from paged_step import feeds, step_arguments  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.llm_package import build_package  # noqa: E402
from luminal.nn.models.paged_decoding import pool_name  # noqa: E402
from luminal.quantize import QUANTIZATIONS  # noqa: E402


def main() -> None:
    parser = step_arguments(layers=12, hidden=768, past=48)
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument(
        "--quantize", choices=QUANTIZATIONS, help="the projections as Q8_0 (bench/llm.py's int8 and w8a8 rows)"
    )
    args = parser.parse_args()
    args.vocab, args.prompt, args.new_tokens = 32000, args.past, 64
    with tempfile.TemporaryDirectory() as tmp:
        hf = write_folder(Path(tmp), args)
        weight_bytes = sum(p.numel() for p in hf.parameters()) * 4
        package = build_package(Path(tmp), max_batch=16, quantize=args.quantize)
    program = lm.compile(package.paged, target="cpu")
    exe, seconds, functions = timed_executable(program)
    pool = package.paged.nodes[package.paged.inputs[pool_name(0, "key")]].shape
    feed, _ = feeds(args.layers, int(pool[1]), int(pool[3]), args.rows, args.past, np.random.default_rng(0))
    exe.run(feed)  # warm-up
    least, walls = np.full(len(functions), np.inf), []
    for _ in range(args.repeats):
        start = time.perf_counter()
        exe.run(feed)
        walls.append(time.perf_counter() - start)
        least = np.minimum(least, np.array(seconds[:]))
    data = np.ones(weight_bytes // 4, np.float32)
    reads = []
    for _ in range(5):
        start = time.perf_counter()
        data.sum()
        reads.append(time.perf_counter() - start)
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")
    wall = f"wall median {np.median(walls) * 1e3:.2f} ms, min {min(walls) * 1e3:.2f} ms"
    print(f"{args.rows} rows, {args.past} past: {wall}")
    print(f"sum of each call's minimum: {least.sum() * 1e3:.2f} ms over {len(functions)} calls")
    print(f"numpy read of {weight_bytes / 1e6:.0f} MB (the float32 weights): {min(reads) * 1e3:.2f} ms (min of 5)")
    totals: dict[str, list] = {}
    for name, t in zip(functions, least):
        totals.setdefault(name, [0, 0.0])
        totals[name][0] += 1
        totals[name][1] += t
    for name, (calls, t) in sorted(totals.items(), key=lambda item: -item[1][1])[:15]:
        print(f"  {name:8s} x{calls:3d} {t * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
