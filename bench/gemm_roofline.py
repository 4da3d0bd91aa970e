"""Luminal's compiled GEMM against this core's FMA peak and against torch (oneDNN/MKL), at the encoder's shapes.

    OMP_NUM_THREADS=1 .venv/bin/python bench/gemm_roofline.py [--shapes 32x384x1152,...] [--rounds N]
        [--variant NAME=FLAGS ...]

Three figures per shape (M rows x K contraction x N columns, a linear layer `x @ w.T` with w of N x K, no bias):
luminal's `lm_run` of the compiled program called alone (no Python binding or output copy around it), torch's
`F.linear` on the same arrays, both in GFLOP/s; and above them the FLOP/s peak of one thread here: a loop of
independent vector FMAs (24 AVX-512 or 12 AVX2 accumulators, more than the FMA latency times the pipes), built by
the same compiler and flags as the generated C. Both runners use OMP_NUM_THREADS threads (torch: the same count).
Each `--variant` adds a luminal column built with extra C flags (e.g. `kc128=-DLM_KC=128`: the GEMM prelude's tile
and blocking macros can be set so).

On a shared machine wall time moves with the other work's load; each round times luminal then torch back to back
(so both see the same load), the figure is the median over rounds of each round's best, and the CPU time per call
(process time over the round's calls) is printed beside it: with one thread it is the core's own time.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_model  # noqa: E402

import luminal as lm  # noqa: E402
import luminal.functional as F  # noqa: E402
from luminal.runtime import cpu  # noqa: E402

# (M, K, N) of the MiniLM-shaped encoder's linears: 32 and 128 tokens, 8 x 128; qkv, out, fc1, fc2.
SHAPES = [(m, k, n) for m in (32, 128, 1024) for k, n in ((384, 1152), (384, 384), (384, 1536), (1536, 384))]

PEAK_SOURCE = """
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
/* Seconds for `iterations` steps of 24 (AVX-512) or 12 (AVX2) independent FMA chains: each FMA waits only on its
   own chain's last, and the chains are named locals (an array of them was stored to the stack every step). */
#if defined(__AVX512F__)
#define LANES 16
typedef __m512 vec;
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SET1(x) _mm512_set1_ps(x)
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \\
  X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define ACC 24
#else
#define LANES 8
typedef __m256 vec;
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SET1(x) _mm256_set1_ps(x)
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define ACC 12
#endif
#define DECLARE(i) vec acc##i = SET1((float)i);
#define STEP(i) acc##i = FMA(acc##i, x, y);
#define SUM(i) total = total + acc##i;
int lm_peak_lanes(void) { return ACC * LANES; }
double lm_peak_seconds(int64_t iterations, float* sink) {
  CHAINS(DECLARE)
  const vec x = SET1(0.999999f), y = SET1(1e-7f);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int64_t it = 0; it < iterations; it++) {
    CHAINS(STEP)
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  vec total = SET1(0.0f);
  CHAINS(SUM)
  float lanes[LANES];
  memcpy(lanes, &total, sizeof(lanes));
  *sink = lanes[0];
  return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}
"""


def fma_peak_gflops(rounds: int = 60) -> float:
    """The best of `rounds` short timings of the FMA loop, in GFLOP/s (an FMA is two FLOPs): short, so that on a
    shared machine some of them run without being preempted."""
    lib = ctypes.CDLL(str(cpu.build_library(PEAK_SOURCE)))
    lib.lm_peak_seconds.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_float)]
    lib.lm_peak_seconds.restype = ctypes.c_double
    sink = ctypes.c_float()
    iterations = 500_000
    best = min(lib.lm_peak_seconds(iterations, ctypes.byref(sink)) for _ in range(rounds))
    return iterations * lib.lm_peak_lanes() * 2 / best / 1e9


def luminal_call(x: np.ndarray, weight: np.ndarray, flags: list[str]) -> Callable[[], object]:
    """`lm_run` of the compiled linear `x @ weight.T` built with `flags` added to the C flags, bound to `x`."""
    g = lm.Graph()
    F.linear(g.input("x", x.shape), g.weight("w", weight.shape)).output("y")
    g.bind({"w": weight})
    base = cpu.CFLAGS
    cpu.CFLAGS = base + flags
    try:
        exe = lm.compile(g, target="cpu").executable
    finally:
        cpu.CFLAGS = base
    out = exe.run({"x": x})["y"]  # binds the table: the input's and the arena's addresses stay as they are
    np.testing.assert_allclose(out, x @ weight.T, rtol=1e-4, atol=1e-4)
    dims = (ctypes.c_int64 * 1)()  # no symbols: static shapes

    def call() -> None:  # the table points into x, which the caller keeps
        if exe.entry(exe.table, dims):
            raise RuntimeError("lm_run failed")

    return call


def timed(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """(best wall seconds per call, process seconds per call) over `calls` back-to-back calls."""
    best, cpu_start = float("inf"), time.process_time()
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best, (time.process_time() - cpu_start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", help="MxKxN,... (default: the encoder's linears at 32, 128 and 1024 rows)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--variant", action="append", default=[], help="NAME=FLAGS: luminal built with C flags")
    args = parser.parse_args()
    variants = {"luminal": []} | {v.split("=", 1)[0]: v.split("=", 1)[1].split() for v in args.variant}
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES

    import torch

    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
    torch.set_num_threads(threads)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; {threads} thread(s); load {os.getloadavg()}")
    peak = fma_peak_gflops()
    print(f"FMA peak, one thread: {peak:.1f} GFLOP/s")
    names = [*variants, "torch"]
    print(f"{'M x K x N':<16} " + " ".join(f"{n:>9}" for n in names) + "  lm/peak lm/torch (GFLOP/s by best wall)")
    rng = np.random.default_rng(0)
    for m, k, n in shapes:
        weight = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        x = rng.standard_normal((m, k)).astype(np.float32)
        tx, tw = torch.from_numpy(x), torch.from_numpy(weight)
        with torch.inference_mode():
            runners = {name: luminal_call(x, weight, flags) for name, flags in variants.items()}
            runners["torch"] = lambda tx=tx, tw=tw: torch.nn.functional.linear(tx, tw)
            flops = 2.0 * m * k * n
            start = time.perf_counter()
            runners["luminal"]()
            calls = max(3, min(200, int(0.05 / max(time.perf_counter() - start, 1e-6))))
            best: dict[str, list[float]] = {name: [] for name in runners}
            cpu_ms: dict[str, list[float]] = {name: [] for name in runners}
            for fn in runners.values():
                fn()
            for _ in range(args.rounds):
                for name, fn in runners.items():
                    wall, used = timed(fn, calls)
                    best[name].append(wall)
                    cpu_ms[name].append(used * 1e3)
        rate = {name: flops / statistics.median(t) / 1e9 for name, t in best.items()}
        cpus = "  ".join(f"{name} {statistics.median(t):.3f}" for name, t in cpu_ms.items())
        shape = f"{m}x{k}x{n}"
        print(
            f"{shape:<16} "
            + " ".join(f"{rate[name]:>9.1f}" for name in names)
            + f" {rate['luminal'] / peak:>7.0%} {rate['luminal'] / rate['torch']:>7.2f}x"
            + f"  cpu ms/call: {cpus}  load {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
