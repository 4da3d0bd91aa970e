"""The platform's serving overhead and the gain from dynamic batching, measured in one run on this machine.

(a) Latency of one small-model request, sequential, p50/p99: through the platform (`luminal serve`: auth,
    metadata lookup, admission, queue, batcher, worker, metrics), deployed with batching off and with batching
    on (max batch 64, 5 ms delay, the default: at concurrency 1 an idle worker must not wait it out), against a
    plain FastAPI endpoint that calls the same compiled program directly (bench/plain_server.py). The platform
    runs twice: embedded (in-process queues, worker threads) and distributed (`LUMINAL_QUEUE_URL=redis://...`,
    Redis Streams and worker processes, as `luminal serve` starts them). The servers are called in turn,
    request by request, so all see the same background load; the difference is the overhead the platform adds.
(b) Throughput of a memory-bound MLP (its weights are read once per batch, so batching pays), with inputs in
    Triton's binary format, at client concurrency 1, 16 and 64, deployed twice on the embedded platform:
    batching on (max batch 64, 2 ms delay) and off (max batch 1), taking turns in blocks within each cell. Then
    the same program in this process at one row and at 64: the gain batching would give if serving cost nothing
    (on few cores the program turns compute-bound well before 64 rows, and the server and the load client share
    those cores).
(c) A real embedding model, all-MiniLM-L6-v2, with sentences of varied lengths at concurrency 1, 8 and 64, on
    both platforms, against the same compiled program and sentence-transformers in-process, and against a plain
    FastAPI endpoint calling that program (bench/sentence_load.py).
(d) tritonclient over REST and over gRPC against the embedded platform: the synchronous clients one request at a
    time, the asyncio clients at concurrency 1 and 8 (bench/protocol_load.py).

Every server runs as its own process; the load client is asyncio aiohttp. The machine's load average is printed
at the start and the end: on a shared machine, compare only figures of one run.
`python bench/serve.py [--quick] [--only a|b|c] [--queue-url redis://host:port/db | none]`.
Goals (issue 4): overhead under 1 ms at p50; at concurrency 64 batching gives >= 5x the throughput. Issue 20:
in (c), p50 at concurrency 1 within +1 ms (embedded) and +3 ms (Redis) of the in-process program. Issue 48: in (d),
both protocols' asyncio clients at concurrency 8 give >= 1.5x the requests/s of one request at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import httpx
import numpy as np

import luminal as lm
import luminal.functional as F
from luminal.cli.client import PlatformClient

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ holds scripts, not a package
import protocol_load  # noqa: E402
import sentence_load  # noqa: E402

HERE = Path(__file__).resolve().parent
WIDE = 4096


def small_model() -> lm.Graph:
    """A two-layer classifier on 32 features: microseconds of compute, so latency is all serving overhead."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("batch", max=256), 32))
    h = F.relu(F.linear(x, g.weight("w1", (64, 32)), g.weight("b1", (64,))))
    F.linear(h, g.weight("w2", (10, 64)), g.weight("b2", (10,))).softmax(-1).output("probs")
    rng = np.random.default_rng(0)
    shapes = {"w1": (64, 32), "b1": (64,), "w2": (10, 64), "b2": (10,)}
    g.bind({k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in shapes.items()})
    return g


def wide_model(width: int = WIDE, depth: int = 2, classes: int = 16) -> lm.Graph:
    """`depth` square layers of `width` and a small head: 128 MB of float32 weights at the defaults, all read
    once per execution whatever the batch, so a batch of 64 costs far less than 64 executions of one."""
    g = lm.Graph()
    h = g.input("x", (lm.sym("batch", max=256), width))
    rng = np.random.default_rng(0)
    weights = {}
    for i in range(depth):
        w, b = g.weight(f"w{i}", (width, width)), g.weight(f"b{i}", (width,))
        weights[f"w{i}"] = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        weights[f"b{i}"] = np.zeros(width, np.float32)
        h = F.relu(F.linear(h, w, b))
    head = g.weight("head", (classes, width))
    weights["head"] = (rng.standard_normal((classes, width)) / np.sqrt(width)).astype(np.float32)
    F.linear(h, head).softmax(-1).output("probs")
    g.bind(weights)
    return g


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"{process.args} exited with status {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    sys.exit(f"nothing answered at {url}")


def deploy(client: PlatformClient, path: Path, name: str, max_batch_size: int, delay_ms: int) -> None:
    client.upload_model(path, name)
    spec = dict(model=name, gpu_type="cpu", max_batch_size=max_batch_size, max_queue_delay_ms=delay_ms)
    deployment = client.create_deployment(**spec, min_replicas=1, max_replicas=1)
    deployment = client.wait_for_compile(deployment["id"], timeout=600)
    if deployment["status"] != "ready":
        sys.exit(f"{name}: {deployment['error']}")


def body(rows: np.ndarray, name: str = "x") -> dict:
    return {"inputs": [{"name": name, "shape": list(rows.shape), "datatype": "FP32", "data": rows.ravel().tolist()}]}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(platform_urls: dict[str, str], key: str, plain_url: str, requests: int) -> None:
    payload = body(np.random.default_rng(1).standard_normal((1, 32)).astype(np.float32))
    auth = {"Authorization": f"Bearer {key}"}
    # A long timeout: the first requests may wait for a worker process to load its program on a busy machine.
    targets = {}
    for mode, url in platform_urls.items():
        suffix = "" if mode == "embedded" else f" ({mode})"
        for name, model in (("platform", "small"), ("platform batched", "small-batching")):
            client = httpx.Client(headers=auth, timeout=120)
            targets[f"{name}{suffix}"] = (client, f"{url}/v2/models/{model}/infer")
    targets["plain FastAPI"] = (httpx.Client(timeout=120), f"{plain_url}/infer")
    times: dict[str, list[float]] = {name: [] for name in targets}
    for i in range(requests + 50):
        for name, (client, url) in targets.items():
            start = time.perf_counter()
            response = client.post(url, json=payload)
            elapsed = (time.perf_counter() - start) * 1e3
            if response.status_code != 200:
                sys.exit(f"{name}: {response.status_code} {response.text[:200]}")
            if i >= 50:  # the first requests warm connections, caches and the workers
                times[name].append(elapsed)
    print(f"\n(a) one small-model request, sequential, {requests} each, interleaved")
    print(f"    {'server':<28}{'p50 ms':>9}{'p99 ms':>9}")
    for name, t in times.items():
        print(f"    {name:<28}{statistics.median(t):>9.3f}{percentile(t, 0.99):>9.3f}")
    for name in [n for n in targets if n.startswith("platform")]:
        overhead = statistics.median(times[name]) - statistics.median(times["plain FastAPI"])
        p99 = percentile(times[name], 0.99) - percentile(times["plain FastAPI"], 0.99)
        print(f"    {name} overhead: p50 {overhead:+.3f} ms, p99 {p99:+.3f} ms (goal: p50 under 1 ms)")


def binary_body(rows: np.ndarray, name: str = "x") -> tuple[bytes, dict[str, str]]:
    """Triton's binary extension: a JSON header naming the tensor, then its raw little-endian bytes."""
    header = json.dumps({"inputs": [{"name": name, "shape": list(rows.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": rows.nbytes}}]}).encode()  # fmt: skip
    return header + rows.astype("<f4").tobytes(), {"Inference-Header-Content-Length": str(len(header))}


async def _load(url: str, key: str, payload: tuple[bytes, dict], concurrency: int, seconds: float) -> tuple[float, int]:
    """`concurrency` clients, each sending its next request when the last is answered, for `seconds`. aiohttp,
    not httpx: httpx's connection pool costs more CPU per request than the server under test at 64 clients."""
    import aiohttp

    headers = {"Authorization": f"Bearer {key}", **payload[1]}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        done = 0
        stop_at = time.perf_counter() + seconds

        async def one_client() -> None:
            nonlocal done
            while time.perf_counter() < stop_at:
                async with session.post(url, data=payload[0]) as response:
                    text = await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{response.status} {text[:200]!r}")
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
        return done / (time.perf_counter() - start), done


def throughput(platform_url: str, key: str, width: int, seconds: float, graph_path: Path) -> None:
    payload = binary_body(np.random.default_rng(2).standard_normal((1, width)).astype(np.float32))
    print(f"\n(b) throughput of a {width}-wide MLP (binary tensors in), requests/s over {seconds:g} s per cell")
    print(f"    {'concurrency':<13}{'batching off':>14}{'batching on':>13}{'ratio':>8}")
    urls = {mode: f"{platform_url}/v2/models/wide-batching-{mode}/infer" for mode in ("off", "on")}
    for concurrency in (1, 16, 64):
        for url in urls.values():
            asyncio.run(_load(url, key, payload, concurrency, min(1.0, seconds)))  # warm
        done, spent = dict.fromkeys(urls, 0), dict.fromkeys(urls, 0.0)
        for _ in range(sentence_load.ROUNDS):  # turns, so that a slow spell of the machine slows both alike
            for mode, url in urls.items():
                rate, n = asyncio.run(_load(url, key, payload, concurrency, seconds / sentence_load.ROUNDS))
                done[mode], spent[mode] = done[mode] + n, spent[mode] + n / rate
        rates = {mode: done[mode] / spent[mode] for mode in urls}
        ratio = rates["on"] / rates["off"]
        print(f"    {concurrency:<13}{rates['off']:>14.1f}{rates['on']:>13.1f}{ratio:>7.2f}x")
    print(f"    {program_batching_bound(graph_path, width)}")
    print("    goal: at concurrency 64, batching on >= 5x batching off")


def program_batching_bound(graph_path: Path, width: int = WIDE, rows: int = 64, repeats: int = 5) -> str:
    """The compiled program in this process at one row and at `rows` rows, each in its own block (median of
    `repeats`): the most batching can gain here if serving cost nothing."""
    program = lm.compile(lm.load(graph_path), target="cpu")
    rng = np.random.default_rng(3)
    medians = {}
    for n in (1, rows):
        x = {"x": rng.standard_normal((n, width)).astype(np.float32)}
        program.run(x)  # warm
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            program.run(x)
            times.append(time.perf_counter() - start)
        medians[n] = statistics.median(times) * 1e3
    bound = rows * medians[1] / medians[rows]
    return (f"the program in-process: 1 row {medians[1]:.2f} ms, {rows} rows {medians[rows]:.2f} ms: "
            f"batching can give at most {bound:.1f}x here")  # fmt: skip


class Served(NamedTuple):
    process: subprocess.Popen
    url: str
    namespace: str | None  # its Redis keys' prefix, deleted afterwards
    grpc_address: str  # host:port of its OIP gRPC server


def start_platform(tmp: Path, key: str, queue_url: str | None) -> Served:
    """`luminal serve` in its own process: embedded (in-process queues, worker threads) when `queue_url` is None,
    else on Redis Streams with worker processes, as `LUMINAL_QUEUE_URL=redis://...` runs it, with its
    gRPC server on."""
    mode = "redis" if queue_url else "embedded"
    port = free_port()
    env = dict(os.environ, LUMINAL_DATA_DIR=str(tmp / f"data-{mode}"), LUMINAL_BOOTSTRAP_KEY=key)
    grpc_port = free_port()
    env["LUMINAL_GRPC_PORT"] = str(grpc_port)
    env["LUMINAL_MAX_QUEUE_DEPTH"] = "4096"
    namespace = None
    if queue_url:
        namespace = f"bench-{secrets.token_hex(6)}"
        env.update(LUMINAL_QUEUE_URL=queue_url, LUMINAL_QUEUE_NAMESPACE=namespace, LUMINAL_WORKER_BACKEND="process")
    process = subprocess.Popen(
        [sys.executable, "-m", "luminal.cli", "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL
    )
    return Served(process, f"http://127.0.0.1:{port}", namespace, f"127.0.0.1:{grpc_port}")


def start_plain(graph_path: Path, port: int) -> subprocess.Popen:
    """The plain FastAPI endpoint (bench/plain_server.py) serving `graph_path`'s program, in its own process."""
    return subprocess.Popen([sys.executable, str(HERE / "plain_server.py"), str(graph_path), str(port)])


def delete_namespace(queue_url: str, namespace: str) -> None:
    import redis

    client = redis.Redis.from_url(queue_url)
    for key in client.scan_iter(match=f"{namespace}:*", count=500):
        client.delete(key)
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="serving overhead and batching throughput")
    parser.add_argument("--quick", action="store_true", help="fewer requests, shorter load phases")
    parser.add_argument(
        "--only",
        choices=("a", "b", "c", "d"),
        help="one section: (a) latency, (b) throughput, (c) a real model, (d) REST and gRPC through tritonclient",
    )
    parser.add_argument(
        "--queue-url",
        default=os.environ.get("LUMINAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="the Redis of the distributed platform in (a) and (c); 'none' leaves it out",
    )
    args = parser.parse_args()
    requests, seconds = (200, 3.0) if args.quick else (1000, 8.0)
    queue_url = None if args.queue_url == "none" else args.queue_url
    key = "lm_" + secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small, wide = tmp / "small.lgraph", tmp / "wide.lgraph"
        lm.save(small_model(), small)
        lm.save(wide_model(), wide)
        minilm = tmp / "minilm.lgraph"
        if args.only in (None, "c"):
            sentence_load.save_graph(minilm)
        platforms = {"embedded": start_platform(tmp, key, None)}
        if queue_url and args.only in (None, "a", "c"):
            platforms["Redis"] = start_platform(tmp, key, queue_url)
        plain_port = free_port()
        plain = start_plain(small, plain_port)
        anchors = [plain]
        if args.only in (None, "c"):  # the plain endpoint calling the real model's program
            minilm_port = free_port()
            plain_minilm = start_plain(minilm, minilm_port)
            anchors.append(plain_minilm)
        try:
            urls = {mode: served.url for mode, served in platforms.items()}
            plain_url = f"http://127.0.0.1:{plain_port}"
            for served in platforms.values():
                wait_for(f"{served.url}/v2/health/live", served.process)
            wait_for(f"{plain_url}/live", plain)
            if args.only in (None, "c"):
                wait_for(f"http://127.0.0.1:{minilm_port}/live", plain_minilm)
            for mode, url in urls.items():
                client = PlatformClient(url, key, timeout=600)
                if args.only in (None, "a"):
                    deploy(client, small, "small", max_batch_size=1, delay_ms=0)
                if args.only in (None, "a", "d"):
                    deploy(client, small, "small-batching", max_batch_size=64, delay_ms=5)
                if args.only in (None, "b") and mode == "embedded":
                    deploy(client, wide, "wide-batching-off", max_batch_size=1, delay_ms=0)
                    deploy(client, wide, "wide-batching-on", max_batch_size=64, delay_ms=2)
                if args.only in (None, "c"):
                    deploy(client, minilm, "minilm", max_batch_size=64, delay_ms=5)
                client.close()
            print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; each server its own process")
            if args.only in (None, "a"):
                latency(urls, key, plain_url, requests)
            if args.only in (None, "b"):
                throughput(urls["embedded"], key, WIDE, seconds, wide)
            if args.only in (None, "c"):
                sentence_load.run(urls, key, minilm, seconds, f"http://127.0.0.1:{minilm_port}")
            if args.only in (None, "d"):
                rest = urls["embedded"].removeprefix("http://")
                protocol_load.run(rest, platforms["embedded"].grpc_address, key, "small-batching", seconds)
            print(f"load average at the end: {os.getloadavg()[0]:.2f}")
        finally:
            for process in anchors + [served.process for served in platforms.values()]:
                process.terminate()
                process.wait(timeout=60)
            for served in platforms.values():
                if served.namespace:
                    delete_namespace(queue_url, served.namespace)


if __name__ == "__main__":
    main()
