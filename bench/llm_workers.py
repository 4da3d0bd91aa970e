"""bench/llm.py's rows through worker processes (`--redis URL`): the same package deployed on a platform in this
process whose workers are processes taking sequences from Redis (gateway -> Redis -> worker -> Redis -> gateway),
streamed through the OpenAI API (bench/llm_http.py's measure), beside the in-process engine's rows and those of the
embedded default's thread worker behind the same HTTP API: what the worker hop costs in time to first token and
inter-token latency, and 16 streams over one.

And the routing row (issue 44): 16 streams whose prompts share a long system prompt, over 2 worker processes, with
prefix-cache affinity (Settings.prefix_routing) and without: mean TTFT, and the prompt tokens the engines
prefilled (all prompt tokens less those their pools found cached: the workers' reused_tokens, from their load
reports). Before each, one stream of the system prompt alone has been served, so one worker caches it.
On a machine shared with other work, run with OMP_NUM_THREADS=1: each process's compiled programs start OpenMP
threads that spin at their barriers, and with several processes (gateway, workers) on few cores those spinning
threads, not the hop, decide the figures.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from pathlib import Path

from llm_http import Row, measure
from platform_server import platform_settings, served

from luminal.scheduler.sequences.redis_sequences import RedisSequences

REPORTED_S = 1.5  # a worker process reports its load (reused tokens included) each second


def redis_shape(url: str, **extra) -> dict:
    """Settings of a platform whose workers are processes on the Redis at `url` (a namespace of its own)."""
    return dict(queue_url=url, worker_backend="process", queue_namespace=f"bench-{uuid.uuid4().hex[:8]}", **extra)


def worker_rows(package: Path, prompts: list[list[int]], new: int, redis_url: str) -> dict[str, Row]:
    """(TTFT s, ITL s, tokens/s) through the HTTP API, one stream then every prompt at once: served by a thread
    worker of the gateway's process (the embedded default: the HTTP and streaming costs alone), then by one worker
    process on Redis (those plus the hop)."""
    rows = {}
    for kind, shape in (("thread worker", {}), ("worker process", redis_shape(redis_url))):
        with tempfile.TemporaryDirectory() as tmp:
            settings = platform_settings(Path(tmp), **shape)
            with served(settings, package, "m", min_replicas=1, max_replicas=1) as platform:
                asyncio.run(measure(platform["url"], prompts[:2], 4, "m"))  # warm: the worker loaded its programs
                rows[f"{kind}, 1 stream"] = asyncio.run(measure(platform["url"], prompts[:1], new, "m"))
                rows[f"{kind}, {len(prompts)} streams"] = asyncio.run(measure(platform["url"], prompts, new, "m"))
    return rows


def routing_rows(package: Path, system: list[int], tails: list[list[int]], new: int, redis_url: str) -> dict:
    """{row name: (mean TTFT s, prompt tokens prefilled, prompt tokens)} with affinity, then without."""
    rows = {}
    for affinity in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            settings = platform_settings(Path(tmp), **redis_shape(redis_url, prefix_routing=affinity))
            with served(settings, package, "m", min_replicas=2, max_replicas=2) as platform:
                sequences = RedisSequences(redis_url, settings.queue_namespace)
                try:
                    rows[f"{'with' if affinity else 'without'} prefix affinity"] = _shared_prompt_run(
                        platform, sequences, system, tails, new
                    )
                finally:
                    sequences.close()
    return rows


def _shared_prompt_run(platform: dict, sequences: RedisSequences, system: list[int], tails: list[list[int]],
                       new: int) -> tuple[float, int, int]:  # fmt: skip
    url, deployment = platform["url"], platform["deployment"]["id"]
    deadline = time.monotonic() + 300
    while len(sequences.loads(deployment)) < 2:  # both workers loaded their model
        assert time.monotonic() < deadline, "two workers never reported"
        time.sleep(0.1)
    asyncio.run(measure(url, [t * 2 for t in tails[:2]], 4, "m"))  # warm both (no shared prefix: one each)
    asyncio.run(measure(url, [system + tails[0]], 2, "m"))  # one worker now caches the system prompt
    time.sleep(REPORTED_S)
    reused = sum(load.reused_tokens for load in sequences.loads(deployment).values())
    prompts = [system + tail for tail in tails]
    ttft, _, _ = asyncio.run(measure(url, prompts, new, "m"))
    time.sleep(REPORTED_S)
    reused = sum(load.reused_tokens for load in sequences.loads(deployment).values()) - reused
    total = sum(len(p) for p in prompts)
    return ttft, total - reused, total
