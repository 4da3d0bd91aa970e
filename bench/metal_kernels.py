"""What the GPU bench's programs dispatch on Metal, without a Mac: counts, not timings, so no anchor beside them.

    .venv/bin/python bench/metal_kernels.py [--small] [--target m3] [--only prefill,encoder,decode-paged]

For each program of bench/gpu.py compiled for an Apple GPU target from zero weights: its dispatches per run by
shape, the dispatches of its load plan (kernels over weights alone, run once: compiler/kernels/derived_weights.py), the
bytes the cost model counts per run at the symbols' maxima, and the bytes of the derived buffers.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu import graphs  # noqa: E402
from gpu_models import FULL, SMALL, zero_weights  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.compiler.analysis.cost import estimate_program  # noqa: E402
from luminal.compiler.metal.program import launch_plan, load_plan  # noqa: E402

PROGRAMS = ("prefill", "encoder", "decode-paged")


def report(name: str, graph: lm.Graph, target: str) -> None:
    prog = lm.compile(graph.bind(zero_weights(graph)), target, cache=False)
    env = None
    if "pool_blocks" in graph.symbols:  # a paged step's pool: the blocks its rows can hold (as gpu_kernels.py)
        env = {"pool_blocks": graph.symbols["batch"].hi * graph.symbols["row_blocks"].hi}
    cost = estimate_program(prog.kernels, prog.target, env)
    run, once = launch_plan(prog.kernels), load_plan(prog.kernels)
    shapes = dict(Counter(launch.shape for launch in run))
    derived = prog.report["memory"].get("derived_bytes", 0)
    print(f"{name}: {len(run)} dispatches per run {shapes}, {len(once)} at load")
    print(f"  {cost.bytes_read / 1e6:.1f} MB read, {cost.bytes_written / 1e6:.1f} MB written per run, "
          f"{derived / 1e6:.1f} MB derived from the weights at load", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="tiny models (seconds), not the full sizes")
    parser.add_argument("--target", default="m3", help="an Apple GPU target: m1, m2, m3 or m4")
    parser.add_argument("--only", default=",".join(PROGRAMS), help="comma-separated programs")
    args = parser.parse_args()
    programs = graphs(SMALL if args.small else FULL)
    for name in args.only.split(","):
        report(name, programs[name], args.target)


if __name__ == "__main__":
    main()
