"""Redis Streams only: entries no gateway of ours wrote, and how a worker's blocking read claims, keeps and
orders what arrives (scheduler/queues/redis_streams.py). The backend-neutral contract is tests/scheduler/
test_queues.py."""

from __future__ import annotations

import threading

from luminal.scheduler.queues.codec import encode_request
from luminal.scheduler.work import FAILED
from tests.scheduler.queue_fixtures import DEPLOYMENT, request


def test_redis_answers_undecodable_entries_instead_of_redelivering_them(redis_namespace, wait):
    from luminal.scheduler.queues.redis_streams import GROUP, RedisStreamsQueue
    from tests.scheduler.queue_fixtures import REDIS_URL

    queue = RedisStreamsQueue(REDIS_URL, redis_namespace)
    try:
        other = encode_request(request(deployment=8))  # valid, but queued under the wrong deployment
        for request_id, payload in [("garbage", b"\x80\x04pickle?"), ("misplaced", other)]:
            queue._submit(keys=queue._streams(DEPLOYMENT), args=[GROUP, 5, 10, request_id, payload])
        good = request()
        queue.submit(good, max_depth=10)
        assert [d.request.id for d in queue.take(DEPLOYMENT, "w1", max_items=10, wait_s=0)] == [good.id]
        garbage, misplaced = wait(queue, "garbage"), wait(queue, "misplaced")
        assert garbage.status == FAILED and "undecodable request: malformed request" in garbage.error
        assert misplaced.status == FAILED and "names deployment 8" in misplaced.error
        assert queue.in_flight(DEPLOYMENT) == 1 and queue.depth(DEPLOYMENT) == 0
    finally:
        queue.close()


def _low_then_urgent(queue) -> tuple[list, list]:
    """Three requests at level 9, then two at level 1, queued (their ids in order)."""
    low = [request(priority=9, value=v) for v in range(3)]
    urgent = [request(priority=1, value=v) for v in range(2)]
    for req in low + urgent:
        queue.submit(req, max_depth=10)
    return low, urgent


def test_redis_blocking_read_keeps_what_it_claimed_beyond_the_take_for_the_next_one(redis_namespace):
    """Requests on several levels reach an idle worker's blocking read together: it claims some of each, hands
    the most urgent over and keeps the rest, in order, for the next take; none is left pending unseen."""
    from luminal.scheduler.queues.redis_streams import RedisStreamsQueue
    from tests.scheduler.queue_fixtures import REDIS_URL

    queue = RedisStreamsQueue(REDIS_URL, redis_namespace)
    try:
        low, urgent = _low_then_urgent(queue)
        got = queue._block_for(DEPLOYMENT, "w1", wanted=2, seconds=1)  # data waiting: it returns at once
        assert [d.request.id for d in got] == [r.id for r in urgent]
        assert queue.in_flight(DEPLOYMENT) == 4 and queue.depth(DEPLOYMENT) == 1
        rest = queue.take(DEPLOYMENT, "w1", max_items=5, wait_s=0)  # the two kept first, then the one queued
        assert [d.request.id for d in rest] == [r.id for r in low]
        assert queue.in_flight(DEPLOYMENT) == 5 and queue.depth(DEPLOYMENT) == 0
    finally:
        queue.close()


def test_redis_a_worker_that_found_the_queue_empty_takes_the_next_request_with_one_blocking_read(redis_namespace):
    """At low load a worker's take goes straight to the blocking read, which returns at once what arrived since
    its last look: no take script (a round trip) per request. Once a look fills its take, it uses the script."""
    from luminal.scheduler.queues import redis_lua
    from luminal.scheduler.queues.redis_streams import RedisStreamsQueue
    from tests.scheduler.queue_fixtures import REDIS_URL

    queue = RedisStreamsQueue(REDIS_URL, redis_namespace)
    scripts = []
    run_script = queue._worker_script
    queue._worker_script = lambda source, *rest: scripts.append(source) or run_script(source, *rest)
    try:
        assert queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=0.05) == []  # one look, then blocking reads
        assert scripts.count(redis_lua.TAKE) == 1
        for _ in range(3):  # requests one at a time, as at concurrency 1
            req = request()
            queue.submit(req, max_depth=10)
            assert [d.request.id for d in queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=5)] == [req.id]
        assert queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=0.2) == []  # idle: blocking reads only
        assert scripts.count(redis_lua.TAKE) == 1
        burst = [request(value=i) for i in range(6)]
        for req in burst:
            queue.submit(req, max_depth=10)
        first = queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=5)  # a blocking read that filled the take
        rest = queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=5)  # so the script looks again: the queue's order
        assert [d.request.id for d in first + rest] == [r.id for r in burst]
        assert scripts.count(redis_lua.TAKE) == 2
    finally:
        queue.close()


def test_redis_what_a_blocking_read_kept_does_not_pass_a_more_urgent_request_queued_since(redis_namespace):
    from luminal.scheduler.queues.redis_streams import RedisStreamsQueue
    from tests.scheduler.queue_fixtures import REDIS_URL

    queue = RedisStreamsQueue(REDIS_URL, redis_namespace)
    try:
        low, urgent = _low_then_urgent(queue)
        got = queue._block_for(DEPLOYMENT, "w1", wanted=2, seconds=1)  # hands over the urgent two, keeps low[:2]
        assert [d.request.id for d in got] == [r.id for r in urgent]
        later = request(priority=1)
        queue.submit(later, max_depth=10)
        taken = queue.take(DEPLOYMENT, "w1", max_items=2, wait_s=5)
        assert [d.request.id for d in taken] == [later.id, low[0].id]
        assert [d.request.id for d in queue.take(DEPLOYMENT, "w1", max_items=5, wait_s=0)] == [r.id for r in low[1:]]
        assert queue.depth(DEPLOYMENT) == 0 and queue.in_flight(DEPLOYMENT) == 6
    finally:
        queue.close()


def test_redis_idle_worker_recovers_when_its_streams_are_deleted(redis_namespace):
    import redis

    from luminal.scheduler.queues.redis_streams import RedisStreamsQueue
    from tests.scheduler.queue_fixtures import REDIS_URL

    queue, client = RedisStreamsQueue(REDIS_URL, redis_namespace), redis.Redis.from_url(REDIS_URL)
    try:
        assert queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=0.05) == []  # made the streams and the group
        client.delete(*queue._streams(DEPLOYMENT))
        assert queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=0.2) == []
        req = request()
        submitter = threading.Timer(0.2, queue.submit, args=(req, 10))
        submitter.start()
        taken = queue.take(DEPLOYMENT, "w1", max_items=4, wait_s=5)
        submitter.join()
        assert [d.request.id for d in taken] == [req.id]
    finally:
        queue.close()
        client.close()
