"""A sequence asked of a language model deployment: what the gateway hands the sequence transport and a worker
takes; and a worker's report of its load. Plain values (the Redis backend writes them as JSON: codec.py). Times
are wall-clock seconds, since the worker may run in another process or on another machine."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property

from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account
from luminal.scheduler.work import DEFAULT_PRIORITY


@dataclass(frozen=True)
class SequenceRequest:
    account: Account  # whom it is billed to; its request_id names the sequence everywhere
    prompt: tuple[int, ...]
    params: SamplingParams
    priority: int = DEFAULT_PRIORITY  # 1 (most urgent) .. 10
    timeout_s: float | None = None  # the longest it may wait to join a batch, from `arrived_at`; None: no limit
    arrived_at: float = field(default_factory=time.time)  # its HTTP request's arrival
    # The gateway relaying its events, whose lease (reader_lease.py) keeps it running: set by a transport across
    # processes; None: read in the process that runs it.
    reader: str | None = None
    # The worker that should take it (routing.py: the one caching its prompt's longest prefix, else the least
    # loaded); any worker may take it after a grace, or at once when that one is gone or overloaded. None: anyone.
    preferred_worker: str | None = None
    # The W3C trace context (traceparent, tracestate) of the gateway span that queued it, so the worker's spans
    # join the caller's trace (scheduler/sequence_spans.py); None when it is not traced.
    trace: dict[str, str] | None = None

    @property
    def id(self) -> str:
        return self.account.request_id

    @property
    def deployment_id(self) -> int:
        return self.account.deployment_id

    def waited_s(self, now: float | None = None) -> float:
        """Seconds since its request arrived (0 when clocks disagree the other way)."""
        return max(0.0, (time.time() if now is None else now) - self.arrived_at)


@dataclass(frozen=True)
class WorkerLoad:
    """What a language-model worker holds, as it last reported (each heartbeat)."""

    running: int  # sequences in its decode batch or prefilling into it
    waiting: int  # sequences it took that wait in its engine's line (for KV cache blocks)
    kv_blocks_free: int | None  # free blocks of its KV pool (None: an engine without block pools)
    reported_at: float = field(default_factory=time.time)
    free_rows: int | None = None  # sequences it could take now (batch rows nobody holds); None: not told
    block_size: int | None = None  # positions per KV block, which `prefixes` are digested by (None: no pool)
    # Short digests of the prompt prefixes its pool holds or caches, each ending at a full block
    # (block_pool.prefix_digests, first PREFIX_DIGEST_BYTES as hex): what a prompt routed to it can reuse.
    prefixes: tuple[str, ...] = ()
    reused_tokens: int = 0  # prompt tokens its engine found cached instead of prefilling, since it started
    kv_blocks: int | None = None  # blocks in its KV pool, free or not (None: no pool)
    tokens_per_s: float = 0.0  # tokens it generated per second, over the time since its previous report
    # The LoRA adapters its engine serves, each with the namespace its prefix-cache blocks are digested under
    # (lora_bank.cache_namespace: it differs between workers, by the order adapters were installed).
    adapters: tuple[tuple[str, str], ...] = ()
    adapter_slots_free: int | None = None  # LoRA slots neither loaded nor still read by a removed adapter's rows
    # Adapters posted for the deployment (adapter_board.py) this worker could not load, with why: the gateway
    # answers their requests with that reason instead of waiting for this worker to hold them.
    adapter_errors: tuple[tuple[str, str], ...] = ()

    @cached_property
    def held_prefixes(self) -> frozenset[str]:
        """`prefixes` as a set, built once per report: routing looks prompts up in it per request."""
        return frozenset(self.prefixes)
