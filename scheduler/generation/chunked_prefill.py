"""Chunked prefill: newcomers' prompts written into their cache blocks a chunk at a time, between decode steps.

A model compiled with a paged chunk program (`luminal.nn.models.paged_decoding.paged_chunk_graph`) prefills
this way. Each round the engine asks for at most `tokens_per_round` prompt tokens, taken from the sequences in
arrival order (the first's next chunk, then the next one's while tokens are left), one chunk-program run each,
so the running sequences' next token waits for at most that much prefill. A prompt's positions already held by
shared prefix blocks are never computed: its chunks start after them. A sequence whose prompt is done leaves with
its last position's logits, to choose its first token and join the decode batch.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from luminal.scheduler.generation.paged_cache import PagedCache
from luminal.scheduler.generation.stream import Failed, TokenStream
from luminal.scheduler.programs import LoadedProgram

log = logging.getLogger(__name__)
# Prompt tokens prefilled per round: one round's prefill delays every running sequence's next token, and fewer
# tokens per chunk-program run use the CPU's vector width and the weights' reads less well.
PREFILL_CHUNK = 256


@dataclass
class Prefilling:
    stream: TokenStream
    done: int  # prompt positions whose keys and values are in the sequence's blocks


class ChunkedPrefill:
    def __init__(self, program: LoadedProgram, cache: PagedCache, tokens_per_round: int = PREFILL_CHUNK):
        most = program.program.graph.nodes[program.program.graph.inputs["input_ids"]].shape[1].hi
        if tokens_per_round < 1:
            raise ValueError(f"a prefill chunk must hold at least one token, got {tokens_per_round}")
        self.program, self.cache = program, cache
        self.tokens_per_round = min(tokens_per_round, int(most))  # the chunk graph's `chunk` symbol bounds a run
        self.queue: list[Prefilling] = []
        # Counters for tests and metrics: chunk-program runs, and the prompt positions they computed.
        self.chunks = self.positions = 0

    def add(self, stream: TokenStream) -> None:
        """A sequence holding its blocks starts prefilling after its shared prefix blocks (already written)."""
        shared = self.cache.pool.shared[id(stream)] * self.cache.pool.block_size
        self.queue.append(Prefilling(stream, shared))

    def drop_cancelled(self) -> list[TokenStream]:
        """Cancelled sequences leave, their blocks freed; returned, since some of their prompt was computed."""
        gone = [p.stream for p in self.queue if p.stream.cancelled]
        for stream in gone:
            self.cache.release(id(stream))
        self.queue = [p for p in self.queue if not p.stream.cancelled]
        return gone

    def round(self) -> list[tuple[TokenStream, np.ndarray]]:
        """Up to `tokens_per_round` prompt tokens; the sequences whose prompts are now done, each with its last
        position's logits, in order. A sequence whose chunk fails is failed and its blocks freed."""
        budget, done = self.tokens_per_round, []
        for item in list(self.queue):
            if budget == 0:
                break
            prompt = item.stream.sequence.prompt
            tokens = prompt[item.done : item.done + budget]
            logits = self._run(item, tokens)
            budget -= len(tokens)
            if logits is None:
                self.queue.remove(item)
            elif item.done == len(prompt):
                self.queue.remove(item)
                done.append((item.stream, logits))
        return done

    def _run(self, item: Prefilling, tokens: list[int]) -> np.ndarray | None:
        stream = item.stream
        if stream.started_at is None:
            stream.started_at = time.time()
        began = time.perf_counter()
        try:
            out = self.program.run(self.cache.chunk_feed(id(stream), tokens, item.done))
        except Exception as e:  # this sequence fails; the others and the running batch go on
            log.exception("prefill chunk failed")
            self.cache.release(id(stream))
            stream.put(Failed(f"prefill failed: {type(e).__name__}: {e}"))
            return None
        stream.compute_s += time.perf_counter() - began
        self.cache.keep_pools(out)
        item.done += len(tokens)
        self.chunks += 1
        self.positions += len(tokens)
        return out["logits"][0]
