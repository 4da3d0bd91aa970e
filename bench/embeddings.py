"""Embeddings throughput: all-MiniLM-L6-v2 (real weights) deployed from its sentence-transformers folder as
`luminal deploy` packages it, called through `POST /openai/v1/embeddings` with the `openai` client (one sentence
per request, base64 as the client asks by default), against sentence-transformers' encode() in this process,
side by side in one run at concurrency 1 and 32. The same compiled program called in this process one sentence at
a time shows what serving adds at concurrency 1.

In-process at concurrency 32 means 32 threads each calling encode() on one sentence (what 32 callers of a model in
one process get); `encode(32 sentences)` is printed too, as the bound that batching the same work reaches. Cells
are timed one after another for `--seconds` each; the machine is shared, so its load average and CPU are printed.

OMP_NUM_THREADS (printed) sets both sides' threads. On a 2-CPU machine shared at load 9-14, the worker's two-thread
OpenMP team waits at every parallel region for a CPU (bench/openmp_teams.py shows the mechanism): at concurrency 1
its compute took 189 ms a request where OMP_NUM_THREADS=1 took 7 ms, so compare runs made under the same setting.

`python bench/embeddings.py [--seconds S] [--small]` (--small: 0.5 s cells and concurrency 1 and 4, the smoke
test's size).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_model  # noqa: E402
from platform_server import platform_settings, served  # noqa: E402
from sentence_load import SENTENCES, model_folder  # noqa: E402

from tests.gateway.conftest import BOOTSTRAP_KEY  # noqa: E402

Cell = tuple[float, float, float]  # (sentences per second, p50 and p90 latency in ms)


def _p50_p90(latencies: list[float]) -> tuple[float, float]:
    deciles = statistics.quantiles(latencies, n=10) if len(latencies) > 1 else latencies * 9
    return statistics.median(latencies), deciles[8]


def _threads(call: Callable[[str], object], concurrency: int, seconds: float) -> Cell:
    """`concurrency` threads, each calling `call` on the next sentence when its last returns, for `seconds`."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def worker(k: int) -> None:
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            call(SENTENCES[k % len(SENTENCES)])
            with lock:
                latencies.append((time.perf_counter() - start) * 1e3)
            k += concurrency

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies) / (time.perf_counter() - start), *_p50_p90(latencies)


async def _clients(base_url: str, concurrency: int, seconds: float, at_least: int = 0) -> Cell:
    """`concurrency` openai clients' requests in flight, one sentence each, for `seconds` (and `at_least` requests
    in all)."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key=BOOTSTRAP_KEY, max_retries=0, timeout=120)
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def one_client(k: int) -> None:
        while time.perf_counter() < stop_at or len(latencies) < at_least:
            start = time.perf_counter()
            answer = await client.embeddings.create(model="minilm", input=SENTENCES[k % len(SENTENCES)])
            assert len(answer.data[0].embedding) == 384
            latencies.append((time.perf_counter() - start) * 1e3)
            k += concurrency

    start = time.perf_counter()
    await asyncio.gather(*(one_client(k) for k in range(concurrency)))
    rate = len(latencies) / (time.perf_counter() - start)
    await client.close()
    return rate, *_p50_p90(latencies)


def _batched_bound(reference, concurrency: int, seconds: float) -> Cell:
    """encode() of `concurrency` sentences at once, repeatedly: (sentences/s, p50 ms per call)."""
    batch = [SENTENCES[k % len(SENTENCES)] for k in range(concurrency)]
    times: list[float] = []
    stop_at = time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        reference.encode(batch)
        times.append(time.perf_counter() - start)
    return concurrency * len(times) / sum(times), *_p50_p90([t * 1e3 for t in times])


def _program_alone(package, seconds: float) -> Cell:
    """The deployment's program called in this process on one tokenized sentence at a time: the compute that the
    HTTP rows at concurrency 1 add serving to."""
    import numpy as np

    import luminal as lm
    from luminal.embedding_package import text_tokenizer

    program = lm.compile(package.graph, target="cpu")
    tokenizer = text_tokenizer(package.tokenizer_json)

    def embed(sentence: str) -> object:
        ids = np.asarray([tokenizer.encode(sentence).ids], np.int64)
        return program.run({"input_ids": ids, "attention_mask": np.ones_like(ids)})

    for sentence in SENTENCES:
        embed(sentence)  # warm
    return _threads(embed, 1, seconds)


def main(argv: list[str] | None = None) -> dict[str, dict[int, Cell]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds each cell runs")
    parser.add_argument("--small", action="store_true", help="0.5 s cells at concurrency 1 and 4")
    args = parser.parse_args(argv)
    seconds, levels = (0.5, (1, 4)) if args.small else (args.seconds, (1, 32))
    from sentence_transformers import SentenceTransformer

    from luminal.embedding_package import build_package, save_package

    reference = SentenceTransformer(str(model_folder()), device="cpu")
    rows: dict[str, dict[int, Cell]] = {}
    built = build_package(model_folder(), max_batch=max(levels))
    with tempfile.TemporaryDirectory(prefix="luminal-bench-embeddings-") as tmp:
        package = Path(tmp) / "minilm.lemb"
        save_package(built, package)
        deployment = {"max_batch_size": max(levels), "max_queue_delay_ms": 5}
        with served(platform_settings(Path(tmp)), package, "minilm", **deployment) as platform:
            base_url = f"{platform['url']}/openai/v1"
            for concurrency in (*levels, len(SENTENCES)):  # warm: every sentence's length, the batch sizes
                asyncio.run(_clients(base_url, concurrency, min(seconds, 1.0), at_least=len(SENTENCES)))
            _threads(lambda s: reference.encode([s]), 1, min(seconds, 1.0))
            for concurrency in levels:
                rows.setdefault("luminal, HTTP (openai client)", {})[concurrency] = asyncio.run(
                    _clients(base_url, concurrency, seconds)
                )
                rows.setdefault("sentence-transformers in-process", {})[concurrency] = _threads(
                    lambda s: reference.encode([s]), concurrency, seconds
                )
                rows.setdefault("sentence-transformers encode(batch)", {})[concurrency] = _batched_bound(
                    reference, concurrency, seconds
                )
        rows["luminal compiled program in-process"] = {1: _program_alone(built, seconds)}
    _print(rows, levels, seconds)
    return rows


def _print(rows: dict[str, dict[int, Cell]], levels: tuple[int, ...], seconds: float) -> None:
    print(f"\nall-MiniLM-L6-v2 embeddings, one sentence per request, {seconds:g} s per cell")
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores); load average {load}; OMP_NUM_THREADS {threads}")
    print(f"    {'runner':<40}{'concurrency':>12}{'sent/s':>9}{'p50 ms':>9}{'p90 ms':>9}")
    for name, cells in rows.items():
        for concurrency, (rate, p50, p90) in cells.items():
            print(f"    {name:<40}{concurrency:>12}{rate:>9.1f}{p50:>9.2f}{p90:>9.2f}")
    ours, theirs = rows["luminal, HTTP (openai client)"], rows["sentence-transformers in-process"]
    for concurrency in levels:
        ratio = ours[concurrency][0] / theirs[concurrency][0]
        print(f"    concurrency {concurrency}: luminal over HTTP / sentence-transformers in-process = {ratio:.2f}x")
    high = max(levels)
    print(f"    luminal throughput at {high} / at 1: {ours[high][0] / ours[1][0]:.2f}x; "
          f"sentence-transformers: {theirs[high][0] / theirs[1][0]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
