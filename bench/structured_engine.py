"""Where a JSON schema's cost lands in the engine (issue 45): the model, schema and prompts of
bench/structured_decode.py run in this process's engine, rounds driven one at a time (no HTTP, no engine thread),
with and without the schema, side by side in every repeat. Printed per decode step, medians over repeats: the wall
time of a round, the CPU time of the thread that drives the rounds (the critical path: the step's program, the
choice of tokens, their delivery), the part of it spent choosing tokens (masks read and applied), and the process's
CPU time (which counts the thread that computes masks ahead); each with the ratio schema / free. CPU model and load.

`python bench/structured_engine.py [--hidden N] [--layers N] [--vocab N] [--new-tokens N] [--repeats N]`
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # as bench/structured_decode.py, for the same reason
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import cpu_model  # noqa: E402
from structured_decode import PROMPTS, SCHEMA, STREAMS, parse_arguments, write_folder  # noqa: E402

from luminal.llm_package import build_package, save_package  # noqa: E402
from luminal.scheduler.generation.engine import GenerationEngine  # noqa: E402
from luminal.scheduler.generation.grammar import JSON_SCHEMA, grammar_request  # noqa: E402
from luminal.scheduler.generation.language_model import compile_package, load_language_model  # noqa: E402
from luminal.scheduler.generation.sampling import SamplingParams  # noqa: E402

COLUMNS = ("wall", "thread", "choose", "process")  # microseconds per decode step


class ChooseTimer:
    """Wraps the engine's chooser: thread CPU nanoseconds spent choosing."""

    def __init__(self, engine: GenerationEngine):
        self.spent, self._choose = 0, engine.chooser.choose
        engine.chooser.choose = self

    def __call__(self, *args, **kwargs):
        began = time.thread_time_ns()
        try:
            return self._choose(*args, **kwargs)
        finally:
            self.spent += time.thread_time_ns() - began


def step_costs(engine: GenerationEngine, timer: ChooseTimer, streams: int, new: int, schema: str | None) -> dict:
    """Microseconds per decode step (COLUMNS) of `streams` sequences decoding together, from when all are running."""
    loop = asyncio.new_event_loop()
    params = SamplingParams(max_tokens=new, temperature=0, ignore_eos=schema is None, response_format=schema)
    for k in range(streams):
        engine.submit(engine.model.codec.encode(PROMPTS[k % len(PROMPTS)]), params, loop)
    while len(engine.running) < streams:
        engine.run_once()
    steps, timer.spent = engine.steps, 0
    wall, thread, process = time.perf_counter_ns(), time.thread_time_ns(), time.process_time_ns()
    while engine.busy:
        engine.run_once()
    spent = (
        time.perf_counter_ns() - wall,
        time.thread_time_ns() - thread,
        timer.spent,
        time.process_time_ns() - process,
    )
    loop.close()
    return {name: ns / 1000 / (engine.steps - steps) for name, ns in zip(COLUMNS, spent)}


def main() -> None:
    args = parse_arguments(__doc__.splitlines()[0], repeats=7)
    folder = Path(tempfile.mkdtemp(prefix="structured-engine-")) / "model"
    folder.mkdir()
    write_folder(folder, args)
    save_package(build_package(folder, max(STREAMS), args.new_tokens + 32), folder / "model.lpkg")
    compile_package(folder / "model.lpkg", "cpu", folder / "model.llmprog")
    engine = GenerationEngine(load_language_model(folder / "model.llmprog"))
    timer, schema = ChooseTimer(engine), grammar_request(JSON_SCHEMA, SCHEMA)
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}); "
          f"load average {os.getloadavg()}")  # fmt: skip
    print(f"Llama hidden {args.hidden}, {args.layers} layers, vocabulary {args.vocab}; {args.new_tokens} tokens per "
          f"stream; us per decode step, free | schema | ratio, median of {args.repeats} repeats")  # fmt: skip
    print(f"{'streams':>8}" + "".join(f"{name:>24}" for name in COLUMNS))
    for streams in STREAMS:
        step_costs(engine, timer, streams, 8, schema)  # warm: the schema compiled
        runs = {False: [], True: []}
        for _ in range(args.repeats):
            for constrained in (False, True):
                runs[constrained].append(
                    step_costs(engine, timer, streams, args.new_tokens, schema if constrained else None)
                )
        cells = []
        for name in COLUMNS:
            free, shaped = (statistics.median(r[name] for r in runs[c]) for c in (False, True))
            cells.append(f"{free:>8.0f}{shaped:>8.0f}{shaped / free:>8.2f}")
        print(f"{streams:>8}" + "".join(cells))
    engine.close()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
