"""Chunked prefill: newcomers' prompts written into their cache blocks a chunk at a time, between decode steps.

A model compiled with a paged chunk program (`luminal.nn.models.paged_decoding.paged_chunk_graph`) prefills
this way. Each round the engine asks for at most `tokens_per_round` prompt tokens, shared out in arrival order
(the first sequence takes what its prompt still needs, then the next one while tokens are left), so the running
sequences' next token waits for at most that much prefill. The sequences of a round run together, one row each:
a chunk-program run takes every row's next chunk of the shortest share, until each has had its share (equal
shares, as a burst of equal prompts has, are one run). One run over many rows reads the weights once, where a run
per sequence read them once each, and its GEMMs have more rows (bench/llm.py, 16 streams of 32-token prompts: mean
time to first token 525 -> 472 ms). A prompt's positions already held by shared prefix blocks are never
computed: its chunks start after them. A sequence whose prompt is done leaves with its last position's logits (the
run's logits and its row there, in the cache's memory space), to choose its first token and join the decode batch.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

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
    def __init__(
        self,
        program: LoadedProgram,
        cache: PagedCache,
        tokens_per_round: int = PREFILL_CHUNK,
        extra_feed: Callable[[list[TokenStream]], dict[str, Any]] = lambda streams: {},
    ):
        most = program.program.graph.nodes[program.program.graph.inputs["input_ids"]].shape[1].hi
        if tokens_per_round < 1:
            raise ValueError(f"a prefill chunk must hold at least one token, got {tokens_per_round}")
        self.program, self.cache = program, cache
        self.extra_feed = extra_feed  # inputs a run takes beside the cache's, by its rows' streams (LoRA slots)
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

    def round(self) -> list[tuple[TokenStream, Any, int]]:
        """Up to `tokens_per_round` prompt tokens; the sequences whose prompts are now done, each with its last
        position's logits (a run's logits [rows, vocab] and its row), in arrival order. The sequences of a failed run
        are failed and their blocks freed."""
        budget, shares = self.tokens_per_round, {}
        for item in self.queue:
            if budget == 0:
                break
            shares[id(item)] = min(len(item.stream.sequence.prompt) - item.done, budget)
            budget -= shares[id(item)]
        logits: dict[int, tuple[Any, int]] = {}
        taking = [item for item in self.queue if id(item) in shares]
        while taking:
            step = min(shares[id(item)] for item in taking)
            out = self._run(taking, step)
            for r, item in enumerate(taking):
                shares[id(item)] -= step
                if out is None:
                    self.queue.remove(item)
                elif item.done == len(item.stream.sequence.prompt):
                    logits[id(item)] = (out, r)
            taking = [item for item in taking if shares[id(item)] and out is not None]
        done = [item for item in self.queue if id(item) in logits]
        self.queue = [item for item in self.queue if id(item) not in logits]
        return [(item.stream, *logits[id(item)]) for item in done]

    def _run(self, items: list[Prefilling], step: int) -> Any | None:
        """The next `step` prompt tokens of every item in one program run: the last positions' logits, a row an
        item, or None when the run failed (its sequences failed and their blocks freed)."""
        for item in items:
            if item.stream.started_at is None:
                item.stream.started_at = time.time()
        rows = [(id(p.stream), p.stream.sequence.prompt[p.done : p.done + step], p.done) for p in items]
        began = time.perf_counter()
        try:
            feed = {**self.cache.chunk_feed(rows), **self.extra_feed([p.stream for p in items])}
            out = self.cache.memory.run(self.program, feed)
        except Exception as e:  # these sequences fail; the others and the running batch go on
            log.exception("prefill chunk failed")
            for item in items:
                self.cache.release(id(item.stream))
                item.stream.put(Failed(f"prefill failed: {type(e).__name__}: {e}"))
            return None
        share = (time.perf_counter() - began) / len(items)  # billed alike: each row is as much of the run
        self.cache.keep_pools(out)
        for item in items:
            item.stream.compute_s += share
            item.done += step
        self.chunks += 1
        self.positions += step * len(items)
        return out["logits"]
