"""What batching varied lengths can gain in-process, apart from serving: all-MiniLM-L6-v2 compiled for the cpu.

Prints (1) per-sentence time and FLOP rate (2 * non-embedding params * tokens + attention) at batch 1 and in
padded batches of 8 and 32, against numpy's float32 GEMM rate at the model's shapes (this machine's reachable
peak); (2) the fit `seconds = a + b * tokens` over those runs and its overhead in tokens (a / b, what
`batching/length_runs.py` weighs one more execution at); (3) the bench's sixteen sentences as batches of 8 and
64 are formed at concurrency 8 and 64 (queue order), each executed as one padded batch or cut into length runs,
against one at a time. Each figure is the median of interleaved rounds.

    .venv/bin/python bench/padding_runs.py [--rounds 7] [--cpu-time]

--cpu-time (for a loaded machine, where wall time measures the neighbours) runs one thread and times the CPU
time this thread spent: the work each way costs, apart from contention (numpy's peak is then one core's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import luminal as lm

sys.path.insert(0, str(Path(__file__).parent))
from sentence_load import save_graph, tokenised  # noqa: E402

HIDDEN, LAYERS = 384, 6
PARAMS = LAYERS * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * 4 * HIDDEN)  # the GEMM weights a token passes through


def flops(rows: int, length: int) -> float:
    return 2.0 * PARAMS * rows * length + LAYERS * 4.0 * rows * length * length * HIDDEN


def random_feed(rows: int, length: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(0).integers(1000, 2000, (rows, length)).astype(np.int64)
    return {"input_ids": ids, "attention_mask": np.ones((rows, length), np.int64)}


CLOCK = time.perf_counter  # time.thread_time with --cpu-time


def medians(calls: dict[str, object], rounds: int) -> dict[str, float]:
    """Median seconds of each call, the calls interleaved round by round (after one warm round)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for k in range(rounds + 1):
        for name, call in calls.items():
            start = CLOCK()
            call()
            if k:
                times[name].append(CLOCK() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def numpy_peak(rounds: int) -> float:
    rates = []
    for rows in (64, 256):
        for k, n in ((HIDDEN, 4 * HIDDEN), (4 * HIDDEN, HIDDEN)):
            a, w = np.ones((rows, k), np.float32), np.ones((k, n), np.float32)
            seconds = medians({"mm": lambda a=a, w=w: a @ w}, rounds * 3)["mm"]
            rates.append(2.0 * rows * k * n / seconds)
    return max(rates)


def shapes_table(program, rounds: int) -> None:
    shapes = [(1, n) for n in (8, 12, 16, 24, 32, 64)] + [(8, n) for n in (8, 16, 32)] + [(32, n) for n in (16, 32)]
    feeds = {s: random_feed(*s) for s in shapes}
    seconds = medians({s: (lambda f=feeds[s]: program.run(f)) for s in shapes}, rounds)
    peak = numpy_peak(rounds)
    print(f"(1) per sentence; numpy float32 GEMM at the model's shapes reaches {peak / 1e9:.0f} GFLOP/s")
    for (rows, length), s in seconds.items():
        rate = flops(rows, length) / s
        per_token = s * 1e3 / (rows * length)
        print(f"    batch {rows:>2} x {length:>2} tokens: {s * 1e3 / rows:7.2f} ms/sentence {per_token:6.3f} ms/token "
              f"{rate / 1e9:6.1f} GFLOP/s ({rate / peak:4.0%} of numpy)")  # fmt: skip
    tokens = np.array([r * n for r, n in seconds], float)
    a, b = np.linalg.lstsq(np.stack([np.ones_like(tokens), tokens], 1), np.array(list(seconds.values())), rcond=None)[0]
    print(f"(2) fit: {a * 1e3:.2f} ms + {b * 1e3:.3f} ms/token -> one execution costs {a / b:.0f} tokens")


def padded(feeds: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    length = max(f["input_ids"].shape[1] for f in feeds)
    out = {name: np.zeros((len(feeds), length), np.int64) for name in ("input_ids", "attention_mask")}
    for k, f in enumerate(feeds):
        for name in out:
            out[name][k, : f[name].shape[1]] = f[name][0]
    return out


def batching_table(program, rounds: int) -> None:
    from luminal.batching.length_runs import length_runs

    feeds = tokenised()
    plans = {"one at a time": [[f] for f in feeds * 4]}
    for size in (8, 64):
        formed = [(feeds * 4)[k : k + size] for k in range(0, 64, size)]  # queue order, as clients send them
        plans[f"batches of {size}, padded whole"] = formed
        plans[f"batches of {size}, length runs"] = [
            run for batch in formed for run in length_runs(batch, lambda f: {"s": f["input_ids"].shape[1]}, lambda f: 1)
        ]
    inputs = {name: [padded(run) for run in runs] for name, runs in plans.items()}
    seconds = medians({n: (lambda xs=xs: [program.run(x) for x in xs]) for n, xs in inputs.items()}, rounds)
    alone = seconds["one at a time"]
    lengths = [f["input_ids"].shape[1] for f in feeds]
    print(f"(3) 64 sentences ({min(lengths)}..{max(lengths)} tokens, mean {np.mean(lengths):.1f}), in-process:")
    for name, s in seconds.items():
        runs = inputs[name]
        computed = sum(x["input_ids"].size for x in runs)
        print(f"    {name:<30} {s * 1e3 / 64:6.2f} ms/sentence {alone / s:5.2f}x  {len(runs):>2} executions, "
              f"{1 - 4 * sum(lengths) / computed:4.0%} of tokens padding")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cpu-time", action="store_true", help="one thread, timed by its CPU time")
    args = parser.parse_args()
    rounds = args.rounds
    if args.cpu_time:
        global CLOCK
        CLOCK = time.thread_time
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)  # numpy's BLAS; the program's OpenMP reads OMP_NUM_THREADS, set before it loads
        os.environ["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "minilm.lgraph"
        save_graph(path)
        program = lm.compile(lm.load(path), target="cpu")
    shapes_table(program, rounds)
    batching_table(program, rounds)


if __name__ == "__main__":
    main()
