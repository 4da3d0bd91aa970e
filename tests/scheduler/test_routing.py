"""Choosing a sequence's worker (scheduler/sequences/routing.py): the worker caching the longest prefix of its
prompt, at the engine's block size and never counting the block of its last token; else the least loaded; never a
worker whose report is stale, nor, for affinity, one whose free rows are already spoken for or that holds more
than BALANCE_SLACK sequences beyond the least loaded. A sequence for a LoRA adapter goes among the workers holding
it, its prefix looked up in that adapter's cache namespace on each."""

from __future__ import annotations

from luminal.scheduler.generation.block_pool import BlockPool
from luminal.scheduler.sequences.request import WorkerLoad
from luminal.scheduler.sequences.routing import (
    BALANCE_SLACK,
    REPORT_STALE_S,
    cached_tokens,
    choose_worker,
    others_may_take,
    short_digest,
    short_digests,
)

NOW, SIZE = 1000.0, 4
SYSTEM = list(range(100, 116))  # 16 tokens: 4 full blocks


def load(
    running=0, waiting=0, prompts=(), free_rows=4, reported_at=NOW, kv_free=64, adapters=(), namespace=""
) -> WorkerLoad:
    """A worker's report whose pool cached `prompts` (under a LoRA adapter's `namespace`, or the base model's), as
    its engine's pool would publish them; `adapters`: the (name, namespace) pairs it serves."""
    pool = BlockPool(64, SIZE)
    for k, prompt in enumerate(prompts):
        pool.reserve(k, len(prompt) + 1, prompt, namespace.encode())
        pool.publish(k)
        pool.release(k)
    prefixes = tuple(short_digest(d) for d in pool.cached_prefixes())
    return WorkerLoad(running, waiting, kv_free, reported_at, free_rows, SIZE, prefixes, adapters=tuple(adapters))


def test_the_reported_prefixes_are_the_pools_digests():
    assert load(prompts=[SYSTEM + [1]]).prefixes == tuple(short_digests(SYSTEM, SIZE))


def test_the_longest_cached_prefix_wins_over_load():
    loads = {"a": load(running=3, prompts=[SYSTEM + [1, 2]]), "b": load(prompts=[SYSTEM[:8] + [7]]), "c": load()}
    prompt = SYSTEM + [9, 9, 9]
    assert cached_tokens(prompt, loads["a"]) == 16 and cached_tokens(prompt, loads["b"]) == 8
    assert choose_worker(prompt, loads, {}, NOW) == "a"
    assert choose_worker(SYSTEM[:8] + [5, 5], loads, {}, NOW) == "b"  # equal hits: the less loaded of a and b


def test_the_block_holding_the_last_prompt_token_is_not_counted():
    cached = load(prompts=[SYSTEM + [1]])
    assert cached_tokens(SYSTEM, cached) == 12  # its 4th block holds its last token: the engine recomputes it
    assert cached_tokens(SYSTEM[:4], cached) == 0


def test_without_a_shared_prefix_the_least_loaded_worker_is_chosen():
    loads = {"a": load(running=3, prompts=[SYSTEM]), "b": load(running=1, waiting=1), "c": load(running=1)}
    assert choose_worker([1, 2, 3, 4, 5, 6, 7, 8, 9], loads, {}, NOW) == "c"
    assert choose_worker([1, 2, 3, 4, 5, 6, 7, 8, 9], loads, {"c": 2}, NOW) == "b"  # sequences waiting for c count
    tied = {"a": load(kv_free=10), "b": load(kv_free=30)}
    assert choose_worker([1, 2], tied, {}, NOW) == "b"  # then the most free cache blocks


def test_affinity_yields_to_load_past_the_balance_slack():
    prompt = SYSTEM + [9]
    holder = load(running=BALANCE_SLACK, prompts=[SYSTEM + [1]])
    assert choose_worker(prompt, {"a": holder, "b": load()}, {}, NOW) == "a"  # at the slack: the prefix wins
    assert choose_worker(prompt, {"a": holder, "b": load()}, {"a": 1}, NOW) == "b"  # one more: the idle one


def test_stale_and_full_workers_lose_their_affinity():
    prompt = SYSTEM + [9]
    stale = {"a": load(prompts=[SYSTEM + [1]], reported_at=NOW - REPORT_STALE_S - 1), "b": load(running=3)}
    assert choose_worker(prompt, stale, {}, NOW) == "b"
    full = {"a": load(prompts=[SYSTEM + [1]], free_rows=2), "b": load(running=1)}
    assert choose_worker(prompt, full, {"a": 1}, NOW) == "a"
    assert choose_worker(prompt, full, {"a": 2}, NOW) == "b"  # a's free rows are spoken for
    assert choose_worker(prompt, {}, {}, NOW) is None


def test_others_may_take_a_gone_stale_or_overloaded_workers_sequences():
    assert others_may_take(None, 0, NOW)
    assert others_may_take(load(reported_at=NOW - REPORT_STALE_S - 1), 0, NOW)
    assert not others_may_take(load(free_rows=2), 2, NOW)
    assert others_may_take(load(free_rows=2), 3, NOW)
    assert not others_may_take(load(free_rows=None), 99, NOW)  # a worker that does not say: wait for the grace


def test_a_sequence_for_an_adapter_goes_to_a_worker_holding_it():
    loads = {"a": load(), "b": load(running=3, adapters=[("sql", "lora:1")]), "c": load(running=1)}
    assert choose_worker([1, 2, 3], loads, {}, NOW, adapter="sql") == "b"  # though the busiest
    assert choose_worker([1, 2, 3], loads, {}, NOW) == "a"  # the base model: any worker
    assert choose_worker([1, 2, 3], loads, {}, NOW, adapter="chat") == "a"  # held by none: as for the base
    stale = {**loads, "b": load(adapters=[("sql", "lora:1")], reported_at=NOW - REPORT_STALE_S - 1)}
    assert choose_worker([1, 2, 3], stale, {}, NOW, adapter="sql") == "a"  # its holder gone


def test_an_adapters_prefix_is_found_in_its_own_cache_namespace_only():
    # a caches the prompt's prefix for the base model, b under the adapter (its namespace is its own install count).
    loads = {"a": load(prompts=[SYSTEM + [1]], adapters=[("sql", "lora:1")]),
             "b": load(running=2, prompts=[SYSTEM + [1]], adapters=[("sql", "lora:2")], namespace="lora:2"),
             "c": load(running=1, adapters=[("sql", "lora:1")])}  # fmt: skip
    prompt = SYSTEM + [9]
    assert cached_tokens(prompt, loads["a"], adapter="sql") == 0 and cached_tokens(prompt, loads["a"]) == 16
    assert cached_tokens(prompt, loads["b"], adapter="sql") == 16 and cached_tokens(prompt, loads["b"]) == 0
    assert choose_worker(prompt, loads, {}, NOW, adapter="sql") == "b"
    assert choose_worker(prompt, loads, {}, NOW) == "a"
