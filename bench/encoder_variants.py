"""The compiled CPU encoder built two ways, in one process, timed in alternating blocks: an A/B of a code generator
switch (a C define the generated code reads, e.g. -DLM_NO_BPREFETCH) or of the packed weights' huge pages.

    .venv/bin/python bench/encoder_variants.py (--flags=-DLM_NO_BPREFETCH | --no-huge-pages)
        [--shapes 1x32,1x128,8x128] [--layers 6] [--rounds 6]

A is the default build; B adds `--flags` to the C flags (the library cache is keyed by source and flags) or puts
the packed weight panels on ordinary pages (runtime/huge_pages.py). The model is bench/encoder_peers.py's
MiniLM-shaped encoder. Each round times A then B, or B then A (alternating), warm-up first; a shape's figure is the
median of all its calls, printed with B / A and both outputs' largest difference. Between processes the same build
moves by 10-30% on a small VM; within one run both see the same machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blocks import MINILM, block_weights, luminal_block  # noqa: E402
from machine import cpu_model  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.runtime import cpu, huge_pages  # noqa: E402


def build(cfg, weights, layers: int, flags: list[str], huge: bool):
    """The encoder compiled and loaded with `flags` added and huge pages as `huge` says."""
    base, was = cpu.CFLAGS, huge_pages.ENABLED
    cpu.CFLAGS, huge_pages.ENABLED = base + flags, huge
    try:
        return lm.compile(luminal_block(cfg, weights, layers=layers), target="cpu").prepare()
    finally:
        cpu.CFLAGS, huge_pages.ENABLED = base, was


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--flags", help="C flags B adds (written --flags=-D...)")
    which.add_argument("--no-huge-pages", action="store_true", help="B: packed weights on ordinary pages")
    parser.add_argument("--shapes", default="1x32,1x128,8x128", help="BxS list")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    flags = (args.flags or "").split()
    print(f"{cpu_model()}; {os.cpu_count()} CPUs; B = {args.flags or 'packed weights on 4 KiB pages'}")
    weights = block_weights(MINILM)
    for batch, seq in (tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")):
        cfg = replace(MINILM, seq=seq)
        x = np.random.default_rng(0).standard_normal((batch, seq, cfg.dim)).astype(np.float32)
        programs = {"A": build(cfg, weights, args.layers, [], True), "B": build(cfg, weights, args.layers, flags,
                                                                             not args.no_huge_pages)}  # fmt: skip
        outs = {n: p.run({"x": x})["y"] for n, p in programs.items()}
        calls = max(3, int(200 / (batch * seq) ** 0.5))  # ~ the same seconds per block at every shape
        ms: dict[str, list[float]] = {"A": [], "B": []}
        for r in range(args.rounds):
            for name in "AB" if r % 2 == 0 else "BA":
                program = programs[name]
                program.run({"x": x})
                for _ in range(calls):
                    start = time.perf_counter()
                    program.run({"x": x})
                    ms[name].append((time.perf_counter() - start) * 1e3)
        a, b = statistics.median(ms["A"]), statistics.median(ms["B"])
        diff = float(np.abs(outs["A"] - outs["B"]).max())
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
        print(f"{batch}x{seq}: A {a:.3f} ms  B {b:.3f} ms  B/A {b / a:.3f}  max |A - B| {diff:.1e}  load {load}")


if __name__ == "__main__":
    main()
