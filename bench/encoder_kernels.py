"""Where the compiled CPU encoder's time goes, kernel by kernel: the MiniLM-shaped encoder of bench/encoder_peers.py
with a clock around every kernel call in `lm_run` (bench/kernel_clock.py).

    OMP_NUM_THREADS=1 .venv/bin/python bench/encoder_kernels.py [--batch 1] [--seq 128] [--repeats 20] [--layers 6]
        [--bf16]

Per kernel function (the six layers share each one): its calls, its share of the summed time, the kind of kernel
(gemm, attention, or an element-wise/reduction loop) and, for a GEMM, its GFLOP/s; each call's time is its minimum
over the repeats (a loaded machine only adds time). Beside them: the wall median of the whole `lm_run` call, the
sum of the per-call minima (what is outside the calls: Python's binding and the output copy) and the load.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blocks import MINILM, block_weights, luminal_block  # noqa: E402
from kernel_clock import call_labels, timed_executable  # noqa: E402
from machine import cpu_model  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.compiler.cpu import codegen_gemm  # noqa: E402

LAYERS = 6


def kinds(program, env: dict[str, int]) -> dict[str, str]:
    """Each kernel's kind by name: 'gemm MxKxN' (with its extents at the bound shape), 'attention', or 'loop'."""
    out = {}

    def size(k, axes) -> int:
        return int(np.prod([int(k.shape[j].evaluate(env)) for j in axes], dtype=np.int64))

    for k in program.kernels.kernels:
        gemm = codegen_gemm.plan(k)
        if gemm is not None:
            depth = int(gemm.contract.extent.evaluate(env))
            out[k.name] = f"gemm {size(k, gemm.batch)}x{size(k, gemm.m)}x{depth}x{size(k, gemm.n)}"
        elif type(getattr(k, "body", None)).__name__ == "Attend":
            out[k.name] = "attention"
        else:
            out[k.name] = "loop"
    return out


def flops(kind: str) -> float:
    found = re.match(r"gemm (\d+)x(\d+)x(\d+)x(\d+)", kind)
    return 2.0 * np.prod([int(v) for v in found.groups()]) if found else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--bf16", action="store_true", help="bf16 weights and input, as encoder_peers")
    args = parser.parse_args()
    cfg = replace(MINILM, seq=args.seq)
    dtype = ml_dtypes.bfloat16 if args.bf16 else np.float32
    weights = {k: v.astype(dtype) for k, v in block_weights(MINILM).items()}
    graph = luminal_block(cfg, weights, layers=args.layers)
    program = lm.compile(graph, target="cpu")
    exe, seconds, functions = timed_executable(program)
    labels = call_labels(program.source)
    x = np.random.default_rng(0).standard_normal((args.batch, args.seq, cfg.dim)).astype(dtype)
    exe.run({"x": x})
    least, walls = np.full(len(functions), np.inf), []
    for _ in range(args.repeats):
        start = time.perf_counter()
        exe.run({"x": x})
        walls.append(time.perf_counter() - start)
        least = np.minimum(least, np.array(seconds[: len(functions)]))
    threads = os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    print(f"CPU: {cpu_model()}; {threads} thread(s); load {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"{args.batch}x{args.seq}: wall median {np.median(walls) * 1e3:.2f} ms, min {min(walls) * 1e3:.2f} ms;")
    print(f"  sum of per-call minima {least.sum() * 1e3:.2f} ms over {len(functions)} calls")
    kind_of = kinds(program, {"batch": args.batch})
    rows: dict[str, list] = {}
    for name, label, t in zip(functions, labels, least):
        kind = kind_of.get(label.split("'")[0], "?")
        row = rows.setdefault(name, [0, 0.0, kind, label])
        row[0] += 1
        row[1] += t
    by_kind: dict[str, float] = {}
    for _, t, kind, _ in rows.values():
        by_kind[kind.split()[0]] = by_kind.get(kind.split()[0], 0.0) + t
    print("  by kind: " + ", ".join(f"{k} {t * 1e3:.2f} ms" for k, t in sorted(by_kind.items(), key=lambda i: -i[1])))
    for name, (calls, t, kind, label) in sorted(rows.items(), key=lambda item: -item[1][1]):
        rate = f"{flops(kind) * calls / t / 1e9:7.1f} GFLOP/s" if flops(kind) else " " * 15
        print(f"  {name:7s} x{calls:3d} {t * 1e3:8.3f} ms {t / least.sum():6.1%}  {rate}  {kind:<24} {label}")


if __name__ == "__main__":
    main()
