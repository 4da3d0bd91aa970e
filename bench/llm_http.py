"""Language-model serving through the HTTP API, where the worker hop shows: a tiny Llama (serving costs dominate its
compute) deployed from a Hugging Face folder, streamed through the `openai` client, one stream alone and then 16
concurrent streams, each row giving the mean time to first token, the mean inter-token latency and the tokens per
second of all streams together, and the 16-stream rate over the one-stream rate.

Two platforms, each in this process: the embedded default (the deployment's worker is a thread of the gateway,
sequences go through the in-memory transport) and, with `--redis URL`, the distributed shape (one worker process
holding the engine, sequences and events through Redis). Goal (issue 44): 16 streams give at least 3x the tokens
per second of one stream. The machine is shared: the load average and the CPU are printed with the figures;
`--repeat N` measures each row N times, alternating 1 and 16 streams, and prints every run's rate and each column's
median, and the CPU per token of the gateway's process, of the worker processes and of the client; with
`--client-process` the openai client runs in a process of its own instead of on the gateway's interpreter, where
its parsing (about as much CPU per token as the gateway's) shares the gateway's GIL. `--small` (4 streams of 4
tokens) is the smoke test's size (tests/bench/test_llm_http_small.py).
`python bench/llm_http.py [--redis redis://127.0.0.1:6379/0] [--new-tokens N] [--repeat N] [--client-process]
[--small]`
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test helpers make the model and server

import openai  # noqa: E402
from machine import cpu_model, cpu_seconds  # noqa: E402
from platform_server import platform_settings, served  # noqa: E402

from luminal.llm_package import build_package, save_package  # noqa: E402
from tests.gateway.conftest import BOOTSTRAP_KEY  # noqa: E402
from tests.llm_folders import hf_folder  # noqa: E402

STREAMS, MAX_BATCH, POSITIONS = 16, 16, 96
PROMPTS = ["the quick brown fox", "hello world", "a compiler of few ops", "language models answer"]
Row = tuple[float, float, float]  # (mean TTFT s, mean inter-token latency s, tokens per second of all streams)


async def stream_once(client: openai.AsyncOpenAI, model: str, prompt: str | list[int], new: int) -> tuple[float, list]:
    """(seconds to the first token, seconds between the later ones) of one streamed completion (`prompt`: text or
    token ids)."""
    began = time.perf_counter()
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=new, temperature=0,
                                             stream=True, extra_body={"ignore_eos": True})  # fmt: skip
    times = [time.perf_counter() async for chunk in stream if chunk.choices and chunk.choices[0].text]
    return times[0] - began, [b - a for a, b in zip(times, times[1:], strict=False)]


async def measure(url: str, prompts: list, new: int, model: str = "tiny-llama") -> Row:
    """One stream per prompt, all at once: (mean TTFT s, mean inter-token latency s, tokens per second)."""
    client = openai.AsyncOpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=300)
    try:
        began = time.perf_counter()
        results = await asyncio.gather(*(stream_once(client, model, p, new) for p in prompts))
        wall = time.perf_counter() - began
    finally:
        await client.close()
    gaps = [g for _, gs in results for g in gs]
    return sum(t for t, _ in results) / len(prompts), sum(gaps) / max(len(gaps), 1), len(prompts) * new / wall


def cycled(streams: int) -> list[str]:
    return [PROMPTS[k % len(PROMPTS)] for k in range(streams)]


def measured_with_cpu(url: str, prompts: list, new: int) -> tuple[Row, float]:
    """`measure`'s row and the CPU seconds this process spent on it (in a client process: the client's alone)."""
    before = time.process_time()
    row = asyncio.run(measure(url, prompts, new))
    return row, time.process_time() - before


def repeated(url: str, counts: tuple[int, ...], new: int, repeat: int, client: ProcessPoolExecutor | None = None):
    """Each stream count's rows, `repeat` runs each, the counts alternating so that a change in the machine's
    load falls on both; and each run's CPU seconds per token of this process (the gateway, the embedded default's
    worker thread, and the client unless `client`, a process of its own, runs it), of the worker processes and of
    the client's process."""
    runs: dict[int, list[Row]] = {n: [] for n in counts}
    cpu: dict[int, list[tuple[float, float, float]]] = {n: [] for n in counts}
    for _ in range(repeat):
        for n in counts:
            here, others = cpu_seconds()
            if client is None:  # its CPU counts in this process's
                row, client_s = measured_with_cpu(url, cycled(n), new)[0], 0.0
            else:
                row, client_s = client.submit(measured_with_cpu, url, cycled(n), new).result()
            after_here, after_others = cpu_seconds()
            runs[n].append(row)
            tokens = n * new
            # /proc counts in clock ticks (10 ms), the client its process_time: the workers' share is floored at 0.
            workers = max(0.0, after_others - others - client_s)
            cpu[n].append(((after_here - here) / tokens, workers / tokens, client_s / tokens))
    return runs, cpu


def median_row(runs: list[Row]) -> Row:
    ttft, itl, rate = zip(*runs, strict=True)
    return statistics.median(ttft), statistics.median(itl), statistics.median(rate)


def print_rows(name: str, runs: dict[int, list[Row]], cpu: dict[int, list[tuple[float, float]]]) -> None:
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"{name}: load average {load}; CPU: {cpu_model()} ({os.cpu_count()} CPUs)")
    rows = {n: median_row(r) for n, r in runs.items()}
    for n, (ttft, itl, rate) in rows.items():
        each = ", ".join(f"{r[2]:.0f}" for r in runs[n])
        print(f"  {n:2d} stream(s): TTFT {ttft * 1000:7.1f} ms  ITL {itl * 1000:6.2f} ms  {rate:8.0f} tokens/s"
              f"  (median of {len(runs[n])}: {each})")  # fmt: skip
        here, workers, client = (statistics.median(c) * 1e6 for c in zip(*cpu[n], strict=True))
        print(f"{'':16s}CPU per token: {here:5.0f} us this process (gateway{', client' if not client else ''}), "
              f"{workers:5.0f} us worker processes, {client:5.0f} us client process")  # fmt: skip
    many = max(rows)
    print(f"  {many} streams / 1 stream: {rows[many][2] / rows[1][2]:.2f}x (goal >= 3x at 16 streams)")


def main(argv: list[str] | None = None) -> dict[str, dict[int, Row]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", help="also run the distributed shape on this Redis (worker processes)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each row; the medians are printed")
    parser.add_argument("--small", action="store_true", help="4 streams of 4 tokens: the smoke test's size")
    parser.add_argument("--client-process", action="store_true",
                        help="the openai client in a process of its own, not sharing the gateway's GIL")  # fmt: skip
    args = parser.parse_args(argv)
    streams, new = (4, 4) if args.small else (STREAMS, args.new_tokens)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hf_folder(root / "llama", "llama")
        package = root / "model.lpkg"
        save_package(build_package(root / "llama", MAX_BATCH, POSITIONS), package)
        shapes = {"embedded (thread worker, memory)": {}}
        if args.redis:
            namespace = f"bench-{uuid.uuid4().hex[:8]}"
            shapes["distributed (worker process, Redis)"] = dict(
                queue_url=args.redis, worker_backend="process", queue_namespace=namespace
            )
        client = ProcessPoolExecutor(1, multiprocessing.get_context("spawn")) if args.client_process else None
        try:
            for k, (name, extra) in enumerate(shapes.items()):
                with served(platform_settings(root / f"platform{k}", **extra), package, "tiny-llama") as platform:
                    asyncio.run(measure(platform["url"], cycled(2), 8))  # warm: the worker started, programs loaded
                    if client is not None:  # and the client's process: its imports
                        client.submit(measured_with_cpu, platform["url"], cycled(2), 8).result()
                    runs, cpu = repeated(platform["url"], (1, streams), new, args.repeat, client)
                print_rows(name + (", client in its own process" if client else ""), runs, cpu)
                results[name] = {n: median_row(r) for n, r in runs.items()}
        finally:
            if client is not None:
                client.shutdown()
    return results


if __name__ == "__main__":
    main()
