"""A/B of the paged decode step's gathers and attention (bench/step_kernels.py's model): the step's C generated
as on main (compiler/cpu/codegen_attention.py as main has it, no compiler/cpu/row_gathers.py), with the per-row
gathers and row-guard versions only, and with the few-row attention too; all built in this process and run in
alternating blocks; per block each kernel function's summed per-call minima (each call named by main's function)
and the median wall time; the medians over blocks printed beside the load.
`python bench/row_gathers_ab.py [--rows N] [--quantize w8a8] [--blocks N] [--repeats N] [--top N]`."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from kernel_clock import timed_executable  # noqa: E402
from llm import write_folder  # noqa: E402
from paged_step import feeds, step_arguments  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.compiler.cpu import codegen_c, row_gathers  # noqa: E402
from luminal.compiler.program import c_source  # noqa: E402
from luminal.llm_package import build_package  # noqa: E402
from luminal.nn.models.paged_decoding import pool_name  # noqa: E402
from luminal.quantize import QUANTIZATIONS  # noqa: E402


def main() -> None:
    parser = step_arguments(layers=12, hidden=768, past=48)
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--quantize", choices=QUANTIZATIONS)
    parser.add_argument("--top", type=int, default=8, help="kernel functions shown, by main's time")
    args = parser.parse_args()
    args.vocab, args.prompt, args.new_tokens = 32000, args.past, 64
    with tempfile.TemporaryDirectory() as tmp:
        write_folder(Path(tmp), args)
        package = build_package(Path(tmp), max_batch=16, quantize=args.quantize)
    program = lm.compile(package.paged, target="cpu")
    main_attention = types.ModuleType("main_codegen_attention")
    exec(subprocess.check_output(["git", "show", "main:compiler/cpu/codegen_attention.py"]), main_attention.__dict__)
    no_gathers = (
        mock.patch.object(row_gathers, "hoist_gathers", lambda e, v, last, extent: v),
        mock.patch.object(row_gathers, "row_guards", lambda v, last: []),
    )
    patches = {
        "main": [*no_gathers, mock.patch.object(codegen_c, "codegen_attention", main_attention)],
        "gathers": [mock.patch.object(codegen_c, "codegen_attention", main_attention)],
        "both": [],
    }
    variants = {}
    for name, active in patches.items():
        p = copy.copy(program)
        for patch in active:
            patch.start()
        p.source = c_source(program.kernels)
        for patch in active:
            patch.stop()
        variants[name] = (*timed_executable(p), p.source)
    pool = package.paged.nodes[package.paged.inputs[pool_name(0, "key")]].shape
    feed, _ = feeds(args.layers, int(pool[1]), int(pool[3]), args.rows, args.past, np.random.default_rng(0))
    outs = {name: exe.run(feed) for name, (exe, *_) in variants.items()}
    for key in outs["main"]:
        np.testing.assert_array_equal(outs["gathers"][key], outs["main"][key])
        # the scores' sums run in another order; with w8a8 a row whose activations round to the other side of an
        # int8 step moves further (main's C is as far from the reference interpreter)
        tolerance = 0.2 if args.quantize == "w8a8" else 1e-3
        np.testing.assert_allclose(outs["both"][key], outs["main"][key], rtol=tolerance, atol=tolerance)
    named = variants["main"][2]  # calls are the same kernels in every variant: each named as main's C names it
    results = {name: ([], {}) for name in variants}
    for _ in range(args.blocks):
        for name, (exe, seconds, _, _) in variants.items():
            least, walls = np.full(len(named), np.inf), []
            for _ in range(args.repeats):
                start = time.perf_counter()
                exe.run(feed)
                walls.append(time.perf_counter() - start)
                least = np.minimum(least, np.array(seconds[:]))
            results[name][0].append(np.median(walls))
            per: dict[str, float] = {"all calls": least.sum()}
            for f, t in zip(named, least):
                per[f] = per.get(f, 0.0) + t
            for f, t in per.items():
                results[name][1].setdefault(f, []).append(t)
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(f"{args.rows} rows, {args.past} past, {args.quantize or 'float32'}, {args.blocks} blocks x {args.repeats}")
    roles = _roles(variants["main"][3])
    ranked = sorted(results["main"][1], key=lambda f: -np.median(results["main"][1][f]))
    shown = ranked[: args.top + 1] + [f for f in ranked[args.top + 1 :] if f in roles]
    header = " ".join(f"{f + roles.get(f, ''):>10s}" for f in shown)
    print(f"  {'variant':8s} {'wall':>8s} {header}  (ms, medians over blocks; g: a gather, a: attention, in main's C)")
    for name, (walls, per) in results.items():
        row = " ".join(f"{np.median(per[f]) * 1e3:10.3f}" for f in shown)
        print(f"  {name:8s} {np.median(walls) * 1e3:8.2f} {row}")


def _roles(source: str) -> dict[str, str]:
    """Kernel function -> "a" for an attention kernel, "g" for a kernel that gathers element by element."""
    roles = {}
    for text in source.split("static int ")[1:]:
        name = text[: text.index("(")]
        if "lm_att_pv(" in text:
            roles[name] = "a"
        elif "lm_err = 1; _tg" in text:
            roles[name] = "g"
    return roles


if __name__ == "__main__":
    main()
