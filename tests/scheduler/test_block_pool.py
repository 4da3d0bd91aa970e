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
