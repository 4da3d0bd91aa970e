"""The board where gateways post the LoRA adapters added to a live deployment and its workers read them
(scheduler/sequences/adapter_board.py), on both transports: one entry per adapter, so concurrent posts never undo
each other; a board never posted to reads None (a worker keeps what it holds), one whose last adapter was removed
reads empty; on Redis, entries another writer left that are no artifact key are skipped, not fatal."""

import redis

from luminal.scheduler.sequences.redis_sequences import RedisSequences
from tests.scheduler.queue_fixtures import REDIS_URL
from tests.scheduler.test_sequence_transport import transport  # noqa: F401 (a fixture: both backends)


def test_adapters_are_posted_and_withdrawn_one_by_one(transport):  # noqa: F811 (the fixture above)
    board = transport.adapters
    assert board.adapters(1) is None
    board.post(1, "terse", "ab/cd")
    board.post(1, "chatty", "ef/01")  # another gateway's post leaves the first
    assert board.adapters(1) == {"terse": "ab/cd", "chatty": "ef/01"}
    assert board.adapters(2) is None  # boards are per deployment
    board.post(1, "terse", None)
    board.post(1, "chatty", None)
    assert board.adapters(1) == {}  # posted, then emptied: the workers drop what they loaded


def test_hostile_entries_on_redis_are_skipped(redis_namespace):
    sequences = RedisSequences(REDIS_URL, redis_namespace)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        sequences.adapters.post(4, "good", "ab/cd")
        key = f"{redis_namespace}:seq:adapters:4"
        client.hset(key, mapping={b"\xff\xfe": b"ab", "long": "x" * 5000, "empty": ""})
        assert sequences.adapters.adapters(4) == {"good": "ab/cd"}
    finally:
        client.close()
        sequences.close()
