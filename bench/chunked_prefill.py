"""What a long prompt arriving costs the streams already decoding: inter-token latency of `--streams` running
streams while one `--prompt`-token prompt is prefilled, with chunked prefill (a chunk of PREFILL_CHUNK tokens
per round) and with the prefill in one go (the same model compiled without its chunk program, as older files
are), on the CPU, in one run.

Each round of the engine delivers one token to every running stream, so a round's duration is their inter-token
latency. Printed per engine: the median round before the long prompt arrives, the median and the longest round
while it is prefilled, and the long prompt's time to first token.
`python bench/chunked_prefill.py [--layers N] [--hidden N] [--prompt N] [--streams N]` (the model is bench/llm.py's
random-weight Llama).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from llm import write_folder  # noqa: E402

from luminal.llm_package import build_package, load_package, save_package  # noqa: E402
from luminal.scheduler.generation.engine import GenerationEngine  # noqa: E402
from luminal.scheduler.generation.language_model import compile_package, load_language_model  # noqa: E402
from luminal.scheduler.generation.sampling import SamplingParams  # noqa: E402

WARM_ROUNDS = 8  # rounds of the running streams alone before the long prompt arrives


def rounds_ms(engine: GenerationEngine, streams: int, prompt: int, rng) -> tuple[list[float], list[float], float]:
    """(rounds before the long prompt, rounds while it is prefilled, its time to first token), in ms."""
    loop = asyncio.new_event_loop()
    decode = SamplingParams(max_tokens=64, temperature=0, ignore_eos=True)  # past every round measured
    running = [engine.submit(rng.integers(2, 1000, 16).tolist(), decode, loop) for _ in range(streams)]
    while len(engine.running) < streams:
        engine.run_once()
    before, during = [], []
    for _ in range(WARM_ROUNDS):
        start = time.perf_counter()
        engine.run_once()
        before.append((time.perf_counter() - start) * 1e3)
    arrived = time.perf_counter()
    long = engine.submit(rng.integers(2, 1000, prompt).tolist(), SamplingParams(4, temperature=0), loop)
    while not long.sequence.tokens:
        start = time.perf_counter()
        engine.run_once()
        during.append((time.perf_counter() - start) * 1e3)
    ttft = (time.perf_counter() - arrived) * 1e3
    for stream in [*running, long]:
        stream.cancel()
    engine.run_once()
    loop.close()
    return before, during, ttft


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--streams", type=int, default=15)
    args = parser.parse_args()
    args.vocab, args.new_tokens = 4000, 64
    engines = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_folder(folder, args)
        save_package(build_package(folder, max_batch=args.streams + 1), folder / "chunked.lpkg")
        package = load_package(folder / "chunked.lpkg")
        package.chunk = None
        save_package(package, folder / "whole.lpkg")
        for name in ("chunked", "whole"):
            start = time.perf_counter()
            compile_package(folder / f"{name}.lpkg", "cpu", folder / f"{name}.llmprog")
            print(f"compile ({name}): {time.perf_counter() - start:.1f} s")
            engines[name] = GenerationEngine(load_language_model(folder / f"{name}.llmprog"))
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print(f"{args.streams} running streams, a {args.prompt}-token prompt arrives; round = their inter-token latency")
    for repeat in range(2):  # interleaved, so drift on a shared machine hits both alike
        for name, engine in engines.items():
            before, during, ttft = rounds_ms(engine, args.streams, args.prompt, np.random.default_rng(repeat))
            print(f"{name:8s} round before {np.median(before):7.1f} ms, during prefill: median "
                  f"{np.median(during):7.1f} ms, longest {max(during):7.1f} ms over {len(during)} rounds; "
                  f"long prompt's first token {ttft:7.1f} ms")  # fmt: skip
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
