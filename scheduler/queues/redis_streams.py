"""The distributed request queue on Redis Streams (`LUMINAL_QUEUE_URL=redis://host:port/db`).

Per deployment, one stream per priority level (so the most urgent level is read first) and one consumer group
on all of them; each worker is a consumer. An idle worker blocks in XREADGROUP on all its levels, so Redis hands
it the next request as it arrives; a worker whose last look found the queue empty goes straight to that blocking
read (which returns at once what arrived meanwhile), so at low load a request costs it no take script. A
delivered request stays pending under its consumer until `complete` stores the result (RPUSH to a per-request
list, with a TTL) and acknowledges it in one atomic script (`complete_all`: a whole batch in one call, with the
batch's usage record for `UsageDrainer` when the worker gives it); `reclaim` moves what a dead consumer left
pending (XAUTOCLAIM). `wait_result` is a BLPOP on the result list, so any gateway
replica can wait for any request; the gateway's admission and wait go through a lean client (`resp_async.py`),
and a worker's take, blocking read and completion through its blocking twin (`resp_sync.py`).
Admission, taking and completion are Lua scripts (`redis_lua.py`), so replicas and workers never race on a depth
check or a double completion.

Every key starts with the namespace, so several platforms (and parallel tests) can share one Redis.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import redis
import redis.asyncio

from luminal.scheduler import usage_journal
from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.queues import codec, redis_lua, resp_async, resp_sync
from luminal.scheduler.queues.base import Delivery, QueueFull, ResultTimeout
from luminal.scheduler.queues.memory import DEFAULT_RESULT_TTL_S, DEFAULT_RETRY_AFTER_S
from luminal.scheduler.work import (
    FAILED,
    HIGHEST_PRIORITY,
    LOWEST_PRIORITY,
    InferenceRequest,
    InferenceResult,
    effective_priority,
    expired_result,
)

GROUP = "workers"
_SUBMIT = redis_lua.SUBMIT.encode()
LEVELS = range(HIGHEST_PRIORITY, LOWEST_PRIORITY + 1)


MAX_BLOCK_S = 1.0  # one blocking call's longest wait, well under any socket timeout


def usage_stream(namespace: str) -> str:
    """The stream of usage records that workers stored with their answers and the drainer has not yet written."""
    return f"{namespace}:usage"


class RedisStreamsQueue:
    stores_usage = True  # complete_all takes the batch's usage record (see UsageDrainer)

    def __init__(
        self,
        url: str,
        namespace: str = "lm",
        result_ttl_s: float = DEFAULT_RESULT_TTL_S,
        retry_after_s: float = DEFAULT_RETRY_AFTER_S,
    ):
        self._url, self._namespace = url, namespace
        self._result_ttl_ms = max(1, int(result_ttl_s * 1000))
        self._retry_after_s = retry_after_s
        self._redis = redis.Redis.from_url(url)
        self._submit = self._redis.register_script(redis_lua.SUBMIT)
        self._counts = self._redis.register_script(redis_lua.COUNTS)
        self._take_now = self._redis.register_script(redis_lua.TAKE)
        self._ensure_groups = self._redis.register_script(redis_lua.ENSURE_GROUPS)
        self._reclaim = self._redis.register_script(redis_lua.RECLAIM)
        self._complete = self._redis.register_script(redis_lua.COMPLETE)
        # redis.asyncio clients belong to the event loop they were made on: one per loop that waits for results.
        self._async_clients: dict[asyncio.AbstractEventLoop, redis.asyncio.Redis] = {}
        self._async_submits: dict[asyncio.AbstractEventLoop, object] = {}  # the admission script on each
        # The gateway's per-request commands go through a lean client where it serves the URL (resp_async.py).
        self._lean = resp_async.supports(url)
        self._lean_clients: dict[asyncio.AbstractEventLoop, resp_async.RespClient] = {}
        # And a worker's (take, its blocking read, completion), through the blocking one (resp_sync.py).
        self._lean_sync = resp_sync.SyncRespClient(url) if self._lean else None
        # Deliveries a blocking read claimed beyond what its take wanted (requests that arrived on several levels
        # at once), per (deployment, consumer): the next take of that consumer returns them first.
        self._spare: dict[tuple[int, str], list[Delivery]] = {}
        self._spare_lock = threading.Lock()  # guards both
        # Consumers whose last look at their deployment's queue found nothing more queued: their next take that may
        # wait blocks at once (`take`).
        self._empty_when_looked: set[tuple[int, str]] = set()
        self._grouped: set[int] = set()  # deployments whose streams all exist with the group

    # --- keys ---

    def _streams(self, deployment_id: int) -> list[str]:
        if not isinstance(deployment_id, int) or isinstance(deployment_id, bool):
            raise ValueError(f"deployment_id must be an int, got {deployment_id!r}")
        return [f"{self._namespace}:queue:{deployment_id}:p{level}" for level in LEVELS]

    def _result_key(self, request_id: str) -> str:
        return f"{self._namespace}:result:{request_id}"

    # --- gateway side ---

    def submit(self, request: InferenceRequest, max_depth: int) -> None:
        keys, args = self._admission(request, max_depth)
        self._check_admitted(request, *self._submit(keys=keys, args=args))

    async def enqueue(self, request: InferenceRequest, max_depth: int) -> None:
        keys, args = self._admission(request, max_depth)
        if self._lean:
            self._check_admitted(request, *await self._lean_client().evalsha(_SUBMIT, keys, args))
            return
        loop = asyncio.get_running_loop()
        script = self._async_submits.get(loop)
        if script is None or self._async_clients.get(loop) is None:
            script = self._async_submits[loop] = self._async_client().register_script(redis_lua.SUBMIT)
        self._check_admitted(request, *await script(keys=keys, args=args))

    def _admission(self, request: InferenceRequest, max_depth: int) -> tuple[list[str], list]:
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {max_depth}")
        level = effective_priority(request.priority)
        payload = codec.encode_request(dataclasses.replace(request, priority=level))
        return self._streams(request.deployment_id), [GROUP, level, max_depth, request.id, payload]

    def _check_admitted(self, request: InferenceRequest, accepted: int, depth: int) -> None:
        if not accepted:
            raise QueueFull(request.deployment_id, depth, self._retry_after_s)

    async def wait_result(self, request_id: str, timeout: float) -> InferenceResult:
        if self._lean:
            return await self._wait_lean(request_id, timeout)
        client = self._async_client()
        key = self._result_key(request_id)
        # BLPOP's timeout has millisecond resolution and 0 means forever, so anything shorter is a plain LPOP.
        # Long waits go in slices: the client's socket timeout (redis-py sets one) must not cut a BLPOP short.
        deadline = time.monotonic() + timeout
        encoded = None
        while encoded is None:
            remaining = deadline - time.monotonic()
            if remaining < 0.001:
                encoded = await client.lpop(key)
                break
            popped = await client.blpop([key], timeout=round(min(remaining, MAX_BLOCK_S), 3))
            encoded = popped[1] if popped else None
        if encoded is None:
            raise ResultTimeout(f"no result for request {request_id} within {timeout:g} s")
        return codec.decode_result(encoded)

    async def _wait_lean(self, request_id: str, timeout: float) -> InferenceResult:
        """`wait_result` through the lean client: BLPOP in slices of MAX_BLOCK_S, LPOP for what is left under 1 ms."""
        client, key = self._lean_client(), self._result_key(request_id)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining < 0.001:
                encoded = await client.call("LPOP", key)
                break
            popped = await client.call_blocking("BLPOP", key, round(min(remaining, MAX_BLOCK_S), 3))
            if popped:
                encoded = popped[1]
                break
        if encoded is None:
            raise ResultTimeout(f"no result for request {request_id} within {timeout:g} s")
        return codec.decode_result(encoded)

    def depth(self, deployment_id: int) -> int:
        return int(self._counts(keys=self._streams(deployment_id), args=[GROUP])[0])

    def in_flight(self, deployment_id: int) -> int:
        return int(self._counts(keys=self._streams(deployment_id), args=[GROUP])[1])

    # --- worker side ---

    def take(self, deployment_id: int, consumer: str, max_items: int, wait_s: float) -> list[Delivery]:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        key = (deployment_id, consumer)
        give_up_at = time.monotonic() + max(wait_s, 0.0)
        while True:
            # A consumer whose last look found nothing queued goes straight to the blocking read, which returns at
            # once whatever arrived since: the take script first would cost a round trip per request at low load.
            taken = []
            if wait_s <= 0 or not self._found_empty(key):
                taken = self._take_queued(deployment_id, consumer, max_items)
            remaining = give_up_at - time.monotonic()
            if taken or remaining <= 0:
                return taken
            # Nothing is queued: block until a request arrives, which Redis then hands to this consumer directly
            # (one round trip from its arrival to the worker, and one idle worker woken per request).
            taken = self._live(self._block_for(deployment_id, consumer, max_items, min(remaining, MAX_BLOCK_S)))
            if taken:
                return taken

    def _take_queued(self, deployment_id: int, consumer: str, max_items: int) -> list[Delivery]:
        """Up to `max_items` of what is queued and what this consumer holds from an earlier blocking read, most
        urgent first, FIFO within a level; what it holds beyond them it keeps for its next take."""
        key = (deployment_id, consumer)
        with self._spare_lock:
            held = self._spare.pop(key, [])
        candidates = self._live(held)
        fresh = 0
        while fresh < max_items:
            wanted = max_items - fresh
            entries = self._worker_script(
                redis_lua.TAKE, self._take_now, self._streams(deployment_id), [GROUP, consumer, wanted]
            )
            self._note_found_empty(key, len(entries) < wanted)
            live = self._live([self._delivery(deployment_id, *entry) for entry in entries])
            candidates += live
            fresh += len(live)
            if len(entries) < wanted:
                break  # the queue is empty (when it fell short only by expired ones, more may be behind them)
        if held:  # held ones are older, but a more urgent request may have been queued since
            candidates.sort(key=_urgency)
        if len(candidates) > max_items:
            with self._spare_lock:
                self._spare.setdefault(key, [])[:0] = candidates[max_items:]
        return candidates[:max_items]

    def _found_empty(self, key: tuple[int, str]) -> bool:
        """Whether the consumer's last look (a take script or a blocking read) found nothing more queued, and it
        holds nothing from a blocking read."""
        with self._spare_lock:
            return key in self._empty_when_looked and not self._spare.get(key)

    def _note_found_empty(self, key: tuple[int, str], empty: bool) -> None:
        with self._spare_lock:
            if empty:
                self._empty_when_looked.add(key)
            else:
                self._empty_when_looked.discard(key)

    def _block_for(self, deployment_id: int, consumer: str, wanted: int, seconds: float) -> list[Delivery]:
        """What a blocking XREADGROUP on every level claims within `seconds`, at most `wanted`, most urgent first.
        Blocked, it gets the first request to arrive; requests that arrived on several levels before it was
        called come together, and those beyond `wanted` are kept for this consumer's next take."""
        streams = self._streams(deployment_id)
        if deployment_id not in self._grouped:  # once: streams are never deleted while the platform runs
            self._ensure_groups(keys=streams, args=[GROUP])
            self._grouped.add(deployment_id)
        block_ms = max(1, int(seconds * 1000))
        try:
            if self._lean_sync is not None:  # entries as [id, [field, value, ...]], as from a script
                reply = self._lean_sync.call(
                    "XREADGROUP", "GROUP", GROUP, consumer, "COUNT", wanted, "BLOCK", block_ms,
                    "STREAMS", *streams, *[">"] * len(streams),
                )  # fmt: skip
            else:
                wanted_streams = dict.fromkeys(streams, ">")
                reply = self._redis.xreadgroup(GROUP, consumer, wanted_streams, count=wanted, block=block_ms)
        except redis.ResponseError:  # NOGROUP: the streams were deleted (a namespace wiped): made again next time
            self._grouped.discard(deployment_id)
            self._note_found_empty((deployment_id, consumer), False)
            return []
        level_of = {stream.encode(): level for level, stream in zip(LEVELS, streams)}
        claimed = [
            self._delivery(deployment_id, level_of[_as_bytes(name)], entry_id, fields)
            for name, entries in reply or []
            for entry_id, fields in entries
        ]
        # COUNT applies per stream: fewer than `wanted` in all means every level gave all it had.
        self._note_found_empty((deployment_id, consumer), len(claimed) < wanted)
        claimed.sort(key=_urgency)
        if len(claimed) > wanted:
            with self._spare_lock:
                self._spare.setdefault((deployment_id, consumer), []).extend(claimed[wanted:])
        return claimed[:wanted]

    def complete(self, delivery: Delivery, result: InferenceResult) -> None:
        """Stores the result and acknowledges in one atomic script; a delivery completed before (by a consumer
        presumed dead whose work was reclaimed) stores nothing, so each request has one result."""
        self.complete_all([(delivery, result)])

    def complete_all(
        self, completions: list[tuple[Delivery, InferenceResult]], usage: UsageRecord | None = None
    ) -> None:
        """One script call for a whole batch: one round trip, however many requests it answers. `usage`, the
        batch's usage record, is appended to the usage stream in the same atomic step (when any result is
        stored), for `UsageDrainer` to move into the database off the answer path."""
        keys, args = [], [GROUP, self._result_ttl_ms, len(completions)]
        for delivery, result in completions:
            level, entry_id = _parse_tag(delivery.tag)
            keys += [self._streams(delivery.request.deployment_id)[level - HIGHEST_PRIORITY],
                     self._result_key(result.request_id)]  # fmt: skip
            args += [entry_id, codec.encode_result(result)]
        if usage is not None:
            keys.append(usage_stream(self._namespace))
            args.append(usage_journal.encode(usage))
        if completions:
            self._worker_script(redis_lua.COMPLETE, self._complete, keys, args)

    def reclaim(self, deployment_id: int, consumer: str, min_idle_s: float, max_items: int) -> list[Delivery]:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        min_idle_ms = max(0, int(min_idle_s * 1000))
        entries = self._reclaim(keys=self._streams(deployment_id), args=[GROUP, consumer, min_idle_ms, max_items])
        return self._live([self._delivery(deployment_id, *entry) for entry in entries])

    def close(self) -> None:
        for loop, client in self._async_clients.items():
            if loop.is_closed():  # its connections went with it
                continue
            closing = asyncio.run_coroutine_threadsafe(client.aclose(), loop)
            if loop.is_running() and not _runs_on(loop):  # wait, unless that would block the loop it waits for
                closing.result(timeout=5)
        self._async_clients.clear()
        self._async_submits.clear()
        for loop, lean in self._lean_clients.items():
            if _runs_on(loop):
                lean.close()
            elif not loop.is_closed():  # its transports belong to its thread
                loop.call_soon_threadsafe(lean.close)
        self._lean_clients.clear()
        if self._lean_sync is not None:
            self._lean_sync.close()
        self._redis.close()

    # --- internals ---

    def _async_client(self) -> redis.asyncio.Redis:
        loop = asyncio.get_running_loop()
        for stale in [other for other in self._async_clients if other.is_closed()]:
            del self._async_clients[stale]
            self._async_submits.pop(stale, None)
        if loop not in self._async_clients:
            self._async_clients[loop] = redis.asyncio.Redis.from_url(self._url)
        return self._async_clients[loop]

    def _worker_script(self, source: str, script, keys: list, args: list):
        """A worker's script call: through the lean blocking client where it serves the URL."""
        if self._lean_sync is not None:
            return self._lean_sync.evalsha(source.encode(), keys, args)
        return script(keys=keys, args=args)

    def _lean_client(self) -> resp_async.RespClient:
        loop = asyncio.get_running_loop()
        client = self._lean_clients.get(loop)
        if client is None:
            for stale in [other for other in self._lean_clients if other.is_closed()]:
                del self._lean_clients[stale]
            client = self._lean_clients[loop] = resp_async.RespClient(self._url)
        return client

    def _delivery(self, deployment_id: int, level: int, entry_id: bytes, fields, attempts: int = 1) -> Delivery:
        """A Delivery from a stream entry; an entry that does not decode carries an `_Undecodable` in place of the
        request, so `_live` answers it FAILED instead of it being re-delivered forever."""
        entry_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        if isinstance(fields, list):  # from a script: a flat field, value list
            fields = dict(zip(fields[::2], fields[1::2]))
        tag = f"{int(level)}/{entry_id}"
        request_id = (fields.get(b"id") or b"?").decode(errors="replace")
        try:
            request = codec.decode_request(fields.get(b"request", b""))
            if request.deployment_id != deployment_id:
                raise ValueError(f"it names deployment {request.deployment_id} but was queued for {deployment_id}")
        except ValueError as e:
            return Delivery(_Undecodable(deployment_id, request_id, str(e)), tag, int(attempts))  # type: ignore
        return Delivery(request, tag, int(attempts))

    def _live(self, deliveries: list[Delivery]) -> list[Delivery]:
        """The deliveries a worker should execute; expired and undecodable ones are answered here."""
        live, answered, now = [], [], time.time()
        for delivery in deliveries:
            request = delivery.request
            if isinstance(request, _Undecodable):
                error = f"undecodable request: {request.reason}"
                answered.append((delivery, InferenceResult(request.id, FAILED, error=error)))
            elif request.expired(now):
                answered.append((delivery, expired_result(request)))
            else:
                live.append(delivery)
        self.complete_all(answered)
        return live


@dataclasses.dataclass
class _Undecodable:
    """Stands in for a request whose bytes did not decode, so it can be answered and acknowledged."""

    deployment_id: int
    id: str
    reason: str


def _as_bytes(name) -> bytes:
    return name if isinstance(name, bytes) else str(name).encode()


def _runs_on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _urgency(delivery: Delivery) -> tuple[int, int, int]:
    """Most urgent level first, then arrival order within it (a stream entry id is milliseconds-sequence)."""
    level, entry_id = _parse_tag(delivery.tag)
    millis, _, sequence = entry_id.partition("-")
    return level, int(millis), int(sequence or 0)


def _parse_tag(tag: str) -> tuple[int, str]:
    level, _, entry_id = tag.partition("/")
    if not level.isdigit() or int(level) not in LEVELS or not entry_id:
        raise ValueError(f"delivery tag {tag!r} was not made by this queue")
    return int(level), entry_id
