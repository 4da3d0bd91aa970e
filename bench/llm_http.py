"""Language-model serving through the HTTP API, where the worker hop shows: a tiny Llama (serving costs dominate its
compute) deployed from a Hugging Face folder, streamed through the `openai` client, one stream alone and then 16
concurrent streams, each row giving the mean time to first token, the mean inter-token latency and the tokens per
second of all streams together, and the 16-stream rate over the one-stream rate.

Two platforms, each in this process: the embedded default (the deployment's worker is a thread of the gateway,
sequences go through the in-memory transport) and, with `--redis URL`, the distributed shape (one worker process
holding the engine, sequences and events through Redis). Goal (issue 44): 16 streams give at least 3x the tokens
per second of one stream. The machine is shared: the load average is printed with the figures.
`python bench/llm_http.py [--redis redis://127.0.0.1:6379/0] [--new-tokens N]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test helpers make the model and server

import httpx  # noqa: E402
import openai  # noqa: E402

from luminal.gateway.app import create_app  # noqa: E402
from luminal.llm_package import build_package, save_package  # noqa: E402
from luminal.store.settings import Settings  # noqa: E402
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, upload  # noqa: E402
from tests.gateway.threaded_server import ThreadedServer, free_port  # noqa: E402
from tests.llm_folders import hf_folder  # noqa: E402

STREAMS, MAX_BATCH, POSITIONS = 16, 16, 96
PROMPTS = ["the quick brown fox", "hello world", "a compiler of few ops", "language models answer"]


async def stream_once(client: openai.AsyncOpenAI, prompt: str, new: int) -> tuple[float, list[float]]:
    """(seconds to the first token, seconds between the later ones) of one streamed completion."""
    began = time.perf_counter()
    stream = await client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=new, temperature=0,
                                             stream=True, extra_body={"ignore_eos": True})  # fmt: skip
    times = [time.perf_counter() async for chunk in stream if chunk.choices and chunk.choices[0].text]
    return times[0] - began, [b - a for a, b in zip(times, times[1:], strict=False)]


async def measure(url: str, streams: int, new: int) -> tuple[float, float, float]:
    """(mean TTFT s, mean inter-token latency s, tokens per second of all streams) of `streams` at once."""
    client = openai.AsyncOpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=300)
    try:
        began = time.perf_counter()
        results = await asyncio.gather(*(stream_once(client, PROMPTS[k % len(PROMPTS)], new) for k in range(streams)))
        wall = time.perf_counter() - began
    finally:
        await client.close()
    gaps = [g for _, gs in results for g in gs]
    return sum(t for t, _ in results) / streams, sum(gaps) / max(len(gaps), 1), streams * new / wall


def serve(settings: Settings, package: Path, new: int) -> dict[int, tuple[float, float, float]]:
    port = free_port()
    server = ThreadedServer(create_app(settings), port)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}, timeout=300) as http:
            assert upload(http, "tiny-llama", package.read_bytes()).status_code == 201
            assert deploy_and_wait(http, "tiny-llama", gpu_type="cpu", min_replicas=1)["status"] == "ready"
        asyncio.run(measure(url, 2, 8))  # warm: the worker started, programs loaded
        return {n: asyncio.run(measure(url, n, new)) for n in (1, STREAMS)}
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", help="also run the distributed shape on this Redis (worker processes)")
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
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
        for k, (name, extra) in enumerate(shapes.items()):
            data = root / f"platform{k}"
            settings = Settings(data_dir=data / "data", database_url=f"sqlite:///{data / 'meta.db'}",
                                bootstrap_key=BOOTSTRAP_KEY, compile_runner="thread", **extra)  # fmt: skip
            rows = serve(settings, package, args.new_tokens)
            print(f"{name}: load average {os.getloadavg()[0]:.2f}")
            for n, (ttft, itl, rate) in rows.items():
                print(f"  {n:2d} stream(s): TTFT {ttft * 1000:7.1f} ms  ITL {itl * 1000:6.2f} ms  {rate:8.0f} tokens/s")
            print(f"  {STREAMS} streams / 1 stream: {rows[STREAMS][2] / rows[1][2]:.2f}x (goal >= 3x)")


if __name__ == "__main__":
    main()
