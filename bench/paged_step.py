"""One compiled decode step, paged (KV block pools read through block tables) beside the concatenating step it
replaced, on the CPU: median milliseconds per step and their ratio, at 1 and 16 rows of `--past` cached positions.

The steps alone, without the engine around them (scheduling, sampling, prefill), so the ratio is the steps'.
`python bench/paged_step.py [--layers N] [--hidden N] [--past N] [--repeats N]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from llm import write_folder  # noqa: E402  (the same random-weight Llama as bench/llm.py)

import luminal as lm  # noqa: E402
from luminal.llm_package import build_package  # noqa: E402
from luminal.nn.models.paged_decoding import DEFAULT_BLOCK_SIZE, pool_name  # noqa: E402


def feeds(layers: int, kv: int, dim: int, rows: int, past: int, rng) -> tuple[dict, dict]:
    """(paged feeds, concatenating feeds) for `rows` rows of `past` cached positions each."""
    ids = rng.integers(2, 100, (rows, 1)).astype(np.int64)
    lengths = np.full((rows, 1), past, np.int64)
    row_blocks = past // DEFAULT_BLOCK_SIZE + 1
    table = np.arange(rows * row_blocks, dtype=np.int64).reshape(rows, row_blocks)
    slots = table[:, -1:] * DEFAULT_BLOCK_SIZE + past % DEFAULT_BLOCK_SIZE
    paged = {"input_ids": ids, "position_ids": lengths, "block_table": table, "slots": slots}
    contiguous = {"input_ids": ids, "position_ids": lengths, "attention_mask": np.ones((rows, past + 1), np.int64)}
    for k in range(layers):
        for part in ("key", "value"):
            # as many blocks as the engine allocates for 16 full rows, whatever the rows in the step
            pool = rng.standard_normal((16 * row_blocks, kv, DEFAULT_BLOCK_SIZE, dim)).astype(np.float32)
            paged[pool_name(k, part)] = pool
            contiguous[f"past.{k}.{part}"] = rng.standard_normal((rows, kv, past, dim)).astype(np.float32)
    return paged, contiguous


def medians_ms(programs: list, feeds_: list[dict], repeats: int) -> list[float]:
    """Median milliseconds per run of each program on its feed, the programs run in turn (drift on a shared
    machine hits them alike)."""
    for program, feed in zip(programs, feeds_):
        program.run(feed)  # warm-up: loads the kernels
    times: list[list[float]] = [[] for _ in programs]
    for _ in range(repeats):
        for program, feed, taken in zip(programs, feeds_, times):
            start = time.perf_counter()
            program.run(feed)
            taken.append(time.perf_counter() - start)
    return [float(np.median(t)) * 1e3 for t in times]


def step_arguments(layers: int = 4, hidden: int = 384, past: int = 420) -> argparse.ArgumentParser:
    """The model's size, the cached positions per row and the timed repeats (bench/step_kernels.py too)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=layers)
    parser.add_argument("--hidden", type=int, default=hidden)
    parser.add_argument("--past", type=int, default=past)
    parser.add_argument("--repeats", type=int, default=30)
    return parser


def main() -> None:
    args = step_arguments().parse_args()
    args.vocab, args.prompt, args.new_tokens = 4000, args.past, 64
    with tempfile.TemporaryDirectory() as tmp:
        write_folder(Path(tmp), args)
        package = build_package(Path(tmp), max_batch=16)
    paged, contiguous = (lm.compile(g, target="cpu") for g in (package.paged, package.graphs.step))
    pool = package.paged.nodes[package.paged.inputs[pool_name(0, "key")]].shape
    layers, kv, dim = args.layers, int(pool[1]), int(pool[3])
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")
    for rows in (1, 16):
        paged_feed, contiguous_feed = feeds(layers, kv, dim, rows, args.past, np.random.default_rng(rows))
        p, c = medians_ms([paged, contiguous], [paged_feed, contiguous_feed], args.repeats)
        print(f"{rows:2d} rows, {args.past} past: paged {p:7.2f} ms, concatenating {c:7.2f} ms", end=", ")
        print(f"paged / concatenating steps per second {c / p:.2f}x")
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
