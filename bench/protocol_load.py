"""Section (d) of bench/serve.py: the same small model through tritonclient over REST (tritonclient.http) and
over gRPC (tritonclient.grpc), each with its synchronous client one request at a time and from 8 threads, and its
asyncio client at concurrency 1 and 8. The protocols take turns in short blocks so a slow spell of the machine
slows both alike.

Goal (issue 48): both protocols scale with concurrency, the asyncio clients at concurrency 8 giving >= 1.5x the
requests/s of one request at a time.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROUNDS = 3  # turns per cell
CONCURRENCY = 8


def _inputs(module, rows: np.ndarray) -> list:
    x = module.InferInput("x", list(rows.shape), "FP32")
    x.set_data_from_numpy(rows)  # binary over REST (the client's default), raw contents over gRPC
    return [x]


def _sync_times(module, address: str, headers: dict, model: str, rows: np.ndarray, seconds: float) -> list[float]:
    """One request at a time with the synchronous client: each request's milliseconds."""
    client = module.InferenceServerClient(address)
    inputs, times = _inputs(module, rows), []
    stop_at = time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        client.infer(model, inputs, headers=headers)
        times.append((time.perf_counter() - start) * 1e3)
    client.close()
    return times


def _threaded_rate(module, address: str, headers: dict, model: str, rows: np.ndarray, seconds: float, n: int):
    """`n` threads, each with its own synchronous client, sending one request at a time: requests/s together."""
    with ThreadPoolExecutor(n) as pool:
        start = time.perf_counter()
        counts = list(pool.map(lambda _: len(_sync_times(module, address, headers, model, rows, seconds)), range(n)))
        return sum(counts) / (time.perf_counter() - start)


async def _async_rate(module, address: str, headers: dict, model: str, rows: np.ndarray, seconds: float, n: int):
    """`n` asyncio tasks, each sending its next request when its last is answered: requests/s."""
    client = module.InferenceServerClient(address)
    inputs, done = _inputs(module, rows), 0
    stop_at = time.perf_counter() + seconds

    async def one() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await client.infer(model, inputs, headers=headers)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    rate = done / (time.perf_counter() - start)
    await client.close()
    return rate


def run(http_address: str, grpc_address: str, key: str, model: str, seconds: float) -> None:
    import tritonclient.grpc as grpc_sync
    import tritonclient.grpc.aio as grpc_aio
    import tritonclient.http as http_sync
    import tritonclient.http.aio as http_aio

    rows = np.random.default_rng(4).standard_normal((1, 32)).astype(np.float32)
    protocols = {
        "REST (tritonclient.http)": (http_sync, http_aio, http_address, {"Authorization": f"Bearer {key}"}),
        "gRPC (tritonclient.grpc)": (grpc_sync, grpc_aio, grpc_address, {"authorization": f"Bearer {key}"}),
    }
    block = seconds / ROUNDS
    times: dict[str, list[float]] = {name: [] for name in protocols}
    aio_rates = {name: {1: 0.0, CONCURRENCY: 0.0} for name in protocols}
    threaded_rates = dict.fromkeys(protocols, 0.0)
    for sync, _, address, headers in protocols.values():  # warm: connections, caches, the worker
        _sync_times(sync, address, headers, model, rows, 0.3)
    for _ in range(ROUNDS):
        for name, (sync, aio, address, headers) in protocols.items():
            times[name] += _sync_times(sync, address, headers, model, rows, block)
            threaded_rates[name] += _threaded_rate(sync, address, headers, model, rows, block, CONCURRENCY) / ROUNDS
            for n in (1, CONCURRENCY):
                aio_rates[name][n] += asyncio.run(_async_rate(aio, address, headers, model, rows, block, n)) / ROUNDS
    print(f"\n(d) tritonclient over REST and gRPC, model {model!r}, {seconds:g} s per cell in {ROUNDS} turns")
    c = CONCURRENCY
    columns = f"{'sync c=1':>9}{f'sync c={c}':>9}{'aio c=1':>9}{f'aio c={c}':>9}{'aio ratio':>10}"
    print(f"    {'protocol':<26}{'sync p50 ms':>12}{columns}")
    for name, t in times.items():
        sync_rate = len(t) / (sum(t) / 1e3)
        one, many = aio_rates[name][1], aio_rates[name][c]
        rates = f"{sync_rate:>9.1f}{threaded_rates[name]:>9.1f}{one:>9.1f}{many:>9.1f}"
        print(f"    {name:<26}{statistics.median(t):>12.3f}{rates}{many / sync_rate:>9.2f}x")
    print(f"    requests/s; sync c={c}: {c} threads with a synchronous client each; aio ratio: the asyncio client at")
    print(f"    concurrency {c} against the synchronous one at a time. Goal: aio ratio >= 1.5x for both protocols")
