"""Which worker a new sequence should go to: the one whose KV cache holds the longest prefix of its prompt
(prefix-cache affinity: those tokens are not prefilled again), else the least loaded one.

The knowledge of who holds what comes from the workers, not from an index a gateway keeps of what it routed:
gateways are replicas, each sees only its own traffic, and none sees what an engine gave up when it needed room.
Each worker reports the prefixes its pool holds or caches (the pool's own digests, at its own block size, so a
match is exactly what its engine can reuse) with its load, through the transport every gateway reads: all
gateways route on the same, engine-true picture. It lags by one report (a heartbeat, sooner after a round that
cached new prefixes), so a burst of prompts sharing a prefix nobody holds yet goes by load, each gateway counting
the sequences already waiting for each worker (the transport's `backlog`).

A sequence for a LoRA adapter goes among the workers reporting the adapter loaded (one added to a live deployment
reaches each worker a moment later: scheduler/live_adapters.py, and the gateway queues the sequence only once one
reports it: gateway/adapter_wait.py), and its prefix is looked up in the adapter's own cache namespace on each
(blocks are shared only within one adapter: block_pool.reserve), never in the base model's. When no live worker
reports it, all are candidates (a worker that starts loads the deployment's adapters before it takes anything).

The transport then delivers the sequence to that worker first, without stranding it (`others_may_take`), and a
sequence for an adapter only to another worker holding it while its preferred worker lives (`may_take_adapter`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from luminal.scheduler.generation.block_pool import prefix_digests
from luminal.scheduler.sequences.request import WorkerLoad

PREFIX_DIGEST_BYTES = 8  # of each reported digest: 2^-64 collisions, and a report of 2048 prefixes stays ~40 KB
MAX_REPORTED_PREFIXES = 2048  # a big pool's report is cut here (the most recently published are kept)
REPORT_STALE_S = 5.0  # a load reported longer ago than this (heartbeats are 1 s apart): its worker is taken for gone
# How many more sequences than the least loaded worker the prefix's holder may hold and still get the sequence.
# Wide: within its free rows (the other bound, `_full`) a sequence joins the holder's batch at once, and a bigger
# batch steps only a little slower, while a worker without the prefix prefills it again; a burst sharing one prompt
# thus stays on the worker caching it, and only a lopsided load spreads.
BALANCE_SLACK = 32
# How long a sequence waits for its preferred worker before any worker may take it: a worker with room takes
# every round or wakes at once when idle, so this only covers one that stalls (a long prefill, a slow host).
PREFERENCE_GRACE_S = 0.5


def short_digest(digest: bytes) -> str:
    """A pool's prefix digest as its worker reports it."""
    return digest[:PREFIX_DIGEST_BYTES].hex()


def short_digests(prompt: Sequence[int], block_size: int, namespace: bytes = b"") -> list[str]:
    """The reported form of each full block's prefix digest (block_pool.prefix_digests)."""
    return [short_digest(d) for d in prefix_digests(prompt, block_size, namespace)]


def cached_tokens(
    prompt: Sequence[int],
    load: WorkerLoad,
    digested: dict[tuple[int, str], list[str]] | None = None,
    adapter: str | None = None,
) -> int:
    """Prompt tokens the worker's engine would find in its cache for the base model (or LoRA `adapter`): its
    leading full blocks the worker reported, never the block holding the prompt's last token (whose logits the
    engine computes: block_pool.reserve). `digested`: the prompt's digests by block size and namespace, filled as
    needed, so routing hashes a prompt once per decision rather than once per worker."""
    size = load.block_size
    namespace = "" if adapter is None else dict(load.adapters).get(adapter)
    if not size or not load.prefixes or namespace is None:
        return 0
    digested = {} if digested is None else digested
    if (size, namespace) not in digested:
        kept = prompt[: (len(prompt) - 1) // size * size]
        digested[size, namespace] = short_digests(kept, size, namespace.encode())
    held, found = load.held_prefixes, 0
    for digest in digested[size, namespace]:
        if digest not in held:
            break
        found += 1
    return found * size


def is_live(load: WorkerLoad, now: float) -> bool:
    return now - load.reported_at <= REPORT_STALE_S


def others_may_take(load: WorkerLoad | None, backlog: int, now: float) -> bool:
    """Whether a sequence waiting for this worker may go to another before its grace ends: the worker is gone
    (no report, or a stale one) or more sequences wait for it than it has free rows (it could not take them all)."""
    if load is None or not is_live(load, now):
        return True
    return load.free_rows is not None and backlog > load.free_rows


def may_take_adapter(adapter: str | None, taker: WorkerLoad | None, preferred: WorkerLoad | None, now: float) -> bool:
    """Whether a worker other than the sequence's preferred one may take it, as far as its LoRA `adapter` (None: the
    base model) goes: the taker holds the adapter, or the preferred worker does not (it is gone, or held none when
    routed: nobody may hold it, and waiting would only strand it)."""
    if adapter is None or preferred is None or not is_live(preferred, now) or adapter not in dict(preferred.adapters):
        return True
    return taker is not None and adapter in dict(taker.adapters)


def choose_worker(
    prompt: Sequence[int],
    loads: Mapping[str, WorkerLoad],
    backlog: Mapping[str, int],
    now: float | None = None,
    adapter: str | None = None,
) -> str | None:
    """The worker the sequence should go to (None: no live worker reported). `backlog`: sequences waiting for
    each worker in the transport; `adapter`: the LoRA adapter it is for (None: the base model), which narrows the
    candidates to the workers holding it, if any do. The cached prefix decides unless its worker is full or holds
    more than BALANCE_SLACK sequences beyond the least loaded."""
    now = time.time() if now is None else now
    live = {w: load for w, load in loads.items() if is_live(load, now)}
    if adapter is not None:
        live = {w: load for w, load in live.items() if adapter in dict(load.adapters)} or live
    if not live:
        return None

    def busyness(worker: str) -> tuple[int, int, str]:
        load = live[worker]
        return load.running + load.waiting + backlog.get(worker, 0), -(load.kv_blocks_free or 0), worker

    least = min(live, key=busyness)
    balanced = [w for w in live if busyness(w)[0] <= busyness(least)[0] + BALANCE_SLACK]
    digested: dict[tuple[int, str], list[str]] = {}
    open_ = [w for w in balanced if not _full(live[w], backlog.get(w, 0))]
    hits = {w: cached_tokens(prompt, live[w], digested, adapter) for w in open_}
    longest = max(hits.values(), default=0)
    if longest > 0:
        return min((w for w, n in hits.items() if n == longest), key=busyness)
    return least


def _full(load: WorkerLoad, backlog: int) -> bool:
    """One more sequence for it would wait behind its free rows: affinity is not worth a queue."""
    return load.free_rows is not None and backlog >= load.free_rows
