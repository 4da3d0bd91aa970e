"""Where one compiled paged decode step's time goes, kernel by kernel, on the CPU: the step's generated C with a
clock around every kernel call in `lm_run`, each call's minimum over the repeats (a loaded machine only adds
time, so the minimum is the nearest to a quiet run), summed by kernel function, beside the wall time of the
whole step and this machine's read bandwidth (torch.sum over 1 GiB, bench/memory_bandwidth.py). The GEMM calls'
weight bytes over their summed minima give the rate the projections read their weights at, against that bandwidth
(issue 47: a one-row decode step should read its weights at the machine's speed); the other calls' time and the
wall time past the calls' sum (marshalling, the ctypes call) are printed apart.

The same random-weight Llama as bench/llm.py (default 125M: 12 layers, hidden 768, vocab 32000) at `--rows` rows
of `--past` cached positions, float32 or (`--quantize int8`) with Q8_0 projections, or (`--quantize w8a8`) with
Q8_0 projections whose input rows are quantised too (int8 x int8). `python bench/step_kernels.py [--layers N]
[--hidden N] [--rows N] [--past N] [--repeats N] [--quantize int8|w8a8]`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from kernel_clock import timed_executable, timed_runs  # noqa: E402
from llm import write_folder  # noqa: E402
from memory_bandwidth import read_bandwidth  # noqa: E402
from paged_step import feeds, step_arguments  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.compiler.analysis import gemm_plan, int_gemm_plan  # noqa: E402
from luminal.compiler.kernels import ir  # noqa: E402
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
        write_folder(Path(tmp), args)
        package = build_package(Path(tmp), max_batch=16, quantize=args.quantize)
    program = lm.compile(package.paged, target="cpu")
    exe, seconds, functions = timed_executable(program)
    pool = package.paged.nodes[package.paged.inputs[pool_name(0, "key")]].shape
    feed, _ = feeds(args.layers, int(pool[1]), int(pool[3]), args.rows, args.past, np.random.default_rng(0))
    exe.run(feed)  # warm-up
    least, walls = timed_runs(exe, feed, seconds, args.repeats)
    median, best, threads = read_bandwidth()
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")
    wall = f"wall median {np.median(walls) * 1e3:.2f} ms, min {min(walls) * 1e3:.2f} ms"
    print(f"{args.rows} rows, {args.past} past: {wall}")
    print(f"sum of each call's minimum: {least.sum() * 1e3:.2f} ms over {len(functions)} calls")
    print(f"memory read bandwidth, torch.sum over 1 GiB on {threads} threads: {median:.1f} GB/s (best {best:.1f})")
    weights = np.array(gemm_weight_bytes(program.kernels), float)
    gemm, rest = least[weights > 0].sum(), least[weights == 0].sum()
    rate = weights.sum() / gemm / 1e9
    print(f"GEMM calls: {weights.sum() / 1e6:.1f} MB of weights in {gemm * 1e3:.2f} ms, {rate:.1f} GB/s "
          f"({rate / median:.0%} of the median); other calls: {rest * 1e3:.2f} ms; "
          f"wall min past the sum: {(min(walls) - least.sum()) * 1e3:.2f} ms")  # fmt: skip
    totals: dict[str, list] = {}
    for name, t, read in zip(functions, least, weights):
        totals.setdefault(name, [0, 0.0, 0.0])
        totals[name][0] += 1
        totals[name][1] += t
        totals[name][2] += read
    for name, (calls, t, read) in sorted(totals.items(), key=lambda item: -item[1][1])[:15]:
        rate = f" {read / t / 1e9:6.1f} GB/s of weights" if read else ""
        print(f"  {name:8s} x{calls:3d} {t * 1e3:8.3f} ms{rate}")


def gemm_weight_bytes(program: ir.KernelProgram) -> list[int]:
    """Per call of `lm_run`: the bytes of weights a GEMM call reads (every weight buffer its body names, in its
    stored type: a Q8_0 projection's int8 values and scales), 0 for any other call."""
    sizes = []
    for k in program.kernels:
        gemm = gemm_plan.plan(k) is not None or int_gemm_plan.plan(k) is not None
        named = [program.buffers[b] for b in ir.buffers_in_order(k)] if gemm else []
        sizes.append(sum(int(b.size.evaluate({})) * b.dtype.itemsize for b in named if b.role == "weight"))
    return sizes


if __name__ == "__main__":
    main()
