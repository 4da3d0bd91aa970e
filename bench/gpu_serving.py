"""(e) of bench/gpu.py: LLM serving on the CUDA runtime. The generation engine (continuous batching, chunked
prefill, the paged step) runs `sequences` concurrent sequences with its KV pools as device arrays that the step
and the chunk write in place and every token chosen by the device sampler (scheduler/generation/memory_space.py,
choosers.py): decode tokens per second over the whole engine round (feeds built, step launched, tokens sampled
and fetched, streams fed), and the host <-> device bytes per decode step, beside the pools' size that stays put.

The engine is given executables already loaded (by the CUDA runtime on a GPU, by the CuPy stand-in in
tests/bench/test_gpu_serving_small.py), so the same setup runs in both places.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

import luminal as lm
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.paged_decoding import DEFAULT_BLOCK_SIZE, paged_chunk_graph, paged_step_graph
from luminal.runtime.registry import runtime_for
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.generation.language_model import LanguageModel
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.programs import LoadedProgram

SERVE_STEP, SERVE_CHUNK = "serve-step", "serve-chunk"
SERVING = "luminal engine, device pools + sampling"


def positions(sizes) -> int:
    """Positions per sequence: a prompt of `context` tokens and as many new ones, as the other decode rows'."""
    return 2 * max(sizes.context + 1, sizes.prefill)


def serving_graphs(sizes) -> dict[str, lm.Graph]:
    """The paged step and the prefill chunk at the bench's batch of `sequences` (weights unbound)."""
    model, most = LlamaForCausalLM(sizes.llama), positions(sizes)
    return {
        SERVE_STEP: paged_step_graph(model, max_batch=sizes.sequences, max_positions=most),
        SERVE_CHUNK: paged_chunk_graph(LlamaForCausalLM(sizes.llama), max_batch=sizes.sequences, max_positions=most),
    }


class Loaded:
    """A program whose executable is already loaded (with the bench's weights), as LoadedProgram takes one."""

    def __init__(self, graph: lm.Graph, executable: Any):
        self.graph, self.executable = graph, executable

    def prepare(self) -> Loaded:
        return self

    def run(self, inputs: dict, dims: dict | None = None) -> dict:
        return self.executable.run(inputs, dims)


def load_serving(programs, graphs: dict[str, lm.Graph], weights: dict) -> dict[str, Any]:
    """The step and chunk compiled (or read) and loaded by the CUDA runtime with `weights` (RuntimeUnavailable
    where it cannot run)."""
    executables = {}
    for name in (SERVE_STEP, SERVE_CHUNK):
        got = programs.get(name, graphs[name].bind(weights))
        print(f"  {name}: {got.how} in {got.seconds:.1f} s, {len(got.program.kernels.kernels)} kernels")
        executables[name] = runtime_for("cuda").load(got.program, weights)
    return executables


def serving_model(sizes, graphs: dict[str, lm.Graph], executables: dict[str, Any]) -> LanguageModel:
    """The engine's model from the loaded step and chunk. The one-go prefill is never run (prompts go through
    the chunk program), and no text is made: a codec that decodes to nothing, with no end-of-sequence token and no
    grammars (no request is constrained)."""
    step, chunk = (LoadedProgram(Loaded(graphs[name], executables[name])) for name in (SERVE_STEP, SERVE_CHUNK))
    codec = SimpleNamespace(decode=lambda tokens: "", eos_token_ids=frozenset(), grammars=None)
    layers = sizes.llama.num_hidden_layers
    return LanguageModel(chunk, step, codec, layers, sizes.sequences, positions(sizes), DEFAULT_BLOCK_SIZE, chunk)


@dataclass
class Served:
    tokens: list[list[int]]  # each sequence's generated tokens
    steps: int  # decode steps timed
    rows: int  # tokens those steps made
    seconds: float
    bytes_in: float  # host -> device bytes per decode step (inputs, sampling parameters)
    bytes_out: float  # device -> host bytes per decode step (token ids)
    pool_bytes: int  # the KV pools' size: what a host-pool engine would move in and out every step

    @property
    def tokens_per_s(self) -> float:
        return self.rows / self.seconds


def serve(model: LanguageModel, sizes, new_tokens: int, params: dict | None = None, seed: int = 0) -> Served:
    """`sizes.sequences` sequences of `sizes.context` random prompt tokens, each `new_tokens` long, all admitted
    and prefilled first; then the decode rounds are timed and their traffic counted."""
    rng = np.random.default_rng(seed)
    settings = dict(temperature=0.8, top_p=0.95) if params is None else params
    engine, loop = GenerationEngine(model, prefill_chunk=sizes.context * sizes.sequences), asyncio.new_event_loop()
    streams = [
        engine.submit(
            rng.integers(0, sizes.llama.vocab_size, sizes.context).tolist(),
            SamplingParams(max_tokens=new_tokens, ignore_eos=True, seed=seed + i, **settings),
            loop,
        )
        for i in range(sizes.sequences)
    ]
    while len(engine.running) < len(streams):
        engine.run_once()
    chooser = engine.chooser
    steps, rows = engine.steps, engine.rows_stepped
    sent, fetched = engine.memory.bytes_in + chooser.bytes_in, chooser.bytes_out
    began = time.perf_counter()
    while engine.busy:
        engine.run_once()
    seconds = time.perf_counter() - began
    loop.close()
    steps, rows = engine.steps - steps, engine.rows_stepped - rows
    sent = (engine.memory.bytes_in + chooser.bytes_in - sent) / steps
    fetched = (chooser.bytes_out - fetched) / steps
    pool_bytes = sum(int(p.nbytes) for p in engine.batch.pools.values())
    return Served([s.sequence.tokens for s in streams], steps, rows, seconds, sent, fetched, pool_bytes)


def report(served: Served, sizes, step_ms: float | None) -> str:
    """The row's lines: tokens/s, traffic per step, and the engine round against the bare batched step."""
    lines = [
        f"(e) LLM serving: {sizes.sequences} concurrent sequences, {sizes.context}-token prompts, "
        f"{served.steps} decode steps timed",
        f"    {SERVING:<40} {served.tokens_per_s:10.1f} tokens/s ({1e3 * served.seconds / served.steps:.3f} ms/step)",
        f"    per step: host->device {served.bytes_in:.0f} B, device->host {served.bytes_out:.0f} B; "
        f"KV pools {served.pool_bytes / 1e6:.1f} MB stay on the device",
    ]
    if step_ms is not None:
        ms = 1e3 * served.seconds / served.steps
        lines.append(f"    an engine round {ms / step_ms:.2f}x the bare batched step's time (d)")
    return "\n".join(lines)
