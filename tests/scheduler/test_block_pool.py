"""The KV block pool: blocks reserved whole for a sequence's prompt plus max_tokens, refused (nothing taken)
when too few are free, returned at once, and slots laid out block by block."""

import pytest

from luminal.scheduler.generation.block_pool import BlockPool, PoolTooSmall


def test_reserve_takes_whole_blocks_and_refuses_without_taking_any():
    pool = BlockPool(blocks=4, block_size=16)
    assert pool.reserve("a", 33)  # 3 blocks
    assert pool.in_use == 3 and pool.tables["a"] == [0, 1, 2]
    assert not pool.reserve("b", 17)  # needs 2, 1 free: nothing is taken
    assert pool.in_use == 3 and "b" not in pool.tables
    assert pool.reserve("c", 16)
    pool.release("a")
    assert pool.in_use == 1 and pool.reserve("b", 17)
    assert set(pool.tables["b"]).isdisjoint(pool.tables["c"])


def test_slots_follow_the_block_table():
    pool = BlockPool(blocks=8, block_size=4)
    pool.reserve("x", 2)
    pool.reserve("y", 9)  # blocks 1, 2, 3
    assert [pool.slot("y", p) for p in (0, 3, 4, 8)] == [4, 7, 8, 12]


def test_a_sequence_larger_than_the_pool_is_named_and_double_reservations_refused():
    pool = BlockPool(blocks=2, block_size=16)
    pool.check_fits(32)
    with pytest.raises(PoolTooSmall, match="needs 3 cache blocks of 16; the pool holds 2"):
        pool.check_fits(33)
    pool.reserve("a", 1)
    with pytest.raises(ValueError, match="already holds"):
        pool.reserve("a", 1)
    pool.release("a")
    pool.release("a")  # releasing twice is harmless
    assert pool.in_use == 0


def test_published_prompt_blocks_are_shared_and_cached_after_their_last_holder():
    pool = BlockPool(blocks=6, block_size=4)
    prompt = list(range(10, 20))  # 10 tokens: 2 full blocks
    assert pool.reserve("a", 12, prompt) and pool.shared["a"] == 0
    assert pool.reserve("b", 12, prompt) and pool.shared["b"] == 0  # nothing published yet: b's own blocks
    pool.release("b")
    pool.publish("a")
    assert pool.reserve("c", 14, prompt[:9] + [99])  # same first 2 blocks, a different 3rd token block
    assert pool.shared["c"] == 2 and pool.tables["c"][:2] == pool.tables["a"][:2]
    assert pool.in_use == 3 + 2  # c took 2 shared + 2 new of its 4
    assert not pool.reserve("d", 8, [10, 11, 12, 99])  # the first block differs: nothing shared, 2 of 1 free
    pool.release("a")
    assert pool.in_use == 4 and len(pool.index) == 2  # c still holds the shared blocks, still published
    pool.release("c")
    assert pool.in_use == 0 and len(pool.index) == 2 and len(pool.cached) == 2  # nobody holds them: cached
    assert pool.reserve("e", 12, prompt) and pool.shared["e"] == 2  # found again after their holders ended
    assert pool.reused_tokens == 2 * 4 + 2 * 4 and not pool.cached  # c's and e's shared blocks


def test_cached_blocks_give_way_to_a_reservation_least_recent_first():
    pool = BlockPool(blocks=4, block_size=2)
    first, second = [1, 2, 3], [5, 6, 7]  # one full block each, published, then released
    for owner, prompt in (("a", first), ("b", second)):
        assert pool.reserve(owner, 3, prompt)
        pool.publish(owner)
        pool.release(owner)
    assert pool.in_use == 0 and len(pool.cached) == 2 and len(pool.free) == 2
    assert pool.reserve("c", 6)  # 3 blocks: the 2 free, then the least recently cached (a's)
    assert len(pool.index) == 1 and pool.in_use == 3
    pool.release("c")  # its blocks held no prompt: free, not cached
    assert pool.reserve("d", 3, second) and pool.shared["d"] == 1  # b's survived
    assert pool.reserve("e", 3, first) and pool.shared["e"] == 0  # a's was given up
    assert not pool.reserve("f", 2) and pool.in_use == 4  # nothing free or cached is left: refused, none taken


def test_the_block_holding_a_prompts_last_token_is_never_shared():
    pool = BlockPool(blocks=8, block_size=4)
    prompt = list(range(10, 18))  # 8 tokens: exactly 2 full blocks, both published
    assert pool.reserve("a", 10, prompt)
    pool.publish("a")
    assert pool.reserve("b", 10, prompt) and pool.shared["b"] == 1  # its last token's block is its own
    assert pool.tables["b"][0] == pool.tables["a"][0] and pool.tables["b"][1] != pool.tables["a"][1]
    assert pool.reserve("c", 10, prompt + [99]) and pool.shared["c"] == 2  # a token past both: both shared
