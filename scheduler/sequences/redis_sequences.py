"""The sequence transport on Redis (`LUMINAL_QUEUE_URL=redis://...`): gateways and worker processes on any
machine share it.

Per deployment, a sorted set of waiting request ids, scored by priority level then arrival (a counter), so the most
urgent and then the oldest is taken first; admission (the bound) and taking are Lua scripts, so replicas and
workers never race on them. Each request's JSON sits under its own key until taken; the deployment's set of taken
ids is its in-flight load. Each sequence's events go to a stream of their own (XADD by the worker, a whole step in
one pipeline; XREAD BLOCK by the gateway relaying it), and a cancel is a key with a TTL that the worker reads
with one MGET per step. Workers' load reports are a hash per deployment. Requests, event streams, cancels and load
reports expire (`ttl_s`), so none that a dead gateway or worker left behind stays; so do a deployment's waiting
set, arrivals counter and taken set, `ttl_s` after their last use (a deleted deployment's). The taken set's
entries of dead workers are dropped when the load is read (taken_owners.py). Expired sequences are ended
by the worker that takes them (the deadline is counted from the request's arrival), or by the gateway's relay
when none does (RelayedStream). Each gateway holds a reader lease (reader_lease.py) named in the requests it
submits: a worker drops the sequences whose gateway's lease lapsed, as if cancelled (read with the cancels).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterable

import redis
import redis.asyncio

from luminal.scheduler.generation.stream import Event, Expired, Failed, Started, expired_message
from luminal.scheduler.generation.waiting import EngineBusy
from luminal.scheduler.sequences import codec
from luminal.scheduler.sequences.base import is_last
from luminal.scheduler.sequences.reader_lease import READER_LEASE_S, ReaderLease
from luminal.scheduler.sequences.request import SequenceRequest, WorkerLoad
from luminal.scheduler.sequences.taken_owners import reap
from luminal.scheduler.work import effective_priority

MAX_BLOCK_S = 1.0  # one blocking call's longest wait, well under any socket timeout
DEFAULT_TTL_S = 3600.0  # how long a request, its events and a cancel are kept: past any sequence's lifetime
ARRIVALS = 1 << 40  # a level's score span: arrivals counted below it order requests within their level

# KEYS: waiting set, request key, arrivals counter. ARGV: request id, level, max waiting, payload, ttl ms.
# Returns -1 when queued, else the count already waiting (refused).
SUBMIT = """
local waiting = redis.call('ZCARD', KEYS[1])
if waiting >= tonumber(ARGV[3]) then return waiting end
local arrival = redis.call('INCR', KEYS[3]) % 1099511627776
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) * 1099511627776 + arrival, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
return -1
"""
# KEYS: waiting set, taken set. ARGV: max items, request key prefix, event stream prefix, the encoded Started
# event naming the worker, ttl ms. Returns the taken requests' payloads (a request whose key expired is skipped).
# Each taken sequence's stream gets the Started event in the same step: a worker killed right after taking it is
# still known as the one that took it, so the gateway relaying it notices its death.
TAKE = """
local popped = redis.call('ZPOPMIN', KEYS[1], ARGV[1])
local taken = {}
for i = 1, #popped, 2 do
  local key = ARGV[2] .. popped[i]
  local payload = redis.call('GET', key)
  if payload then
    redis.call('DEL', key)
    redis.call('SADD', KEYS[2], popped[i])
    local events = ARGV[3] .. popped[i]
    redis.call('XADD', events, '*', 'e', ARGV[4])
    redis.call('PEXPIRE', events, ARGV[5])
    table.insert(taken, payload)
  end
end
return taken
"""


class RedisSequences:
    def __init__(
        self, url: str, namespace: str = "lm", ttl_s: float = DEFAULT_TTL_S, reader_lease_s: float = READER_LEASE_S
    ):
        self._url, self._ns = url, namespace
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._redis = redis.Redis.from_url(url)
        self._submit = self._redis.register_script(SUBMIT)
        self._take = self._redis.register_script(TAKE)
        # redis.asyncio clients belong to the event loop they were made on: one per loop that reads events.
        self._async_clients: dict[asyncio.AbstractEventLoop, redis.asyncio.Redis] = {}
        self._deployment_of: dict[str, int] = {}  # the deployment of each sequence this worker took, until it ends
        self._reader_of: dict[str, str] = {}  # the reader lease key of each sequence this worker took, until it ends
        self.reader_id = uuid.uuid4().hex  # this gateway's, held from its first submit
        self._lease = ReaderLease(self._redis, self._key("reader", self.reader_id), reader_lease_s)

    def _key(self, *parts: object) -> str:
        return ":".join([self._ns, "seq", *map(str, parts)])

    # --- gateway side ---
    def submit(self, request: SequenceRequest, max_waiting: int) -> None:
        self._lease.hold()
        if request.reader is None:
            request = dataclasses.replace(request, reader=self.reader_id)
        d = request.deployment_id
        keys = [self._key("waiting", d), self._key("request", request.id), self._key("arrivals", d)]
        args = [request.id, effective_priority(request.priority), max_waiting, codec.encode_request(request)]
        waiting = self._submit(keys=keys, args=[*args, self._ttl_ms])
        if waiting >= 0:
            raise EngineBusy(f"{waiting} sequences are already waiting for this model; retry later")

    async def events(self, request_id: str) -> AsyncIterator[Event]:
        client, key, last = self._async_client(), self._key("events", request_id), "0-0"
        while True:
            reply = await client.xread({key: last}, block=int(MAX_BLOCK_S * 1000))
            for _, entries in reply or ():
                for entry_id, fields in entries:
                    last = entry_id
                    event = codec.decode_event(fields[b"e"])
                    yield event
                    if is_last(event):
                        return

    def cancel(self, request_id: str) -> None:
        payload = self._redis.get(self._key("request", request_id))
        with self._redis.pipeline() as pipe:
            if payload is not None:  # still waiting: no worker will take it now
                pipe.zrem(self._key("waiting", codec.decode_request(payload).deployment_id), request_id)
                pipe.delete(self._key("request", request_id))
            pipe.set(self._key("cancel", request_id), 1, px=self._ttl_ms)
            pipe.execute()

    def abandon(self, request: SequenceRequest, reason: str) -> None:
        events = self._key("events", request.id)
        with self._redis.pipeline() as pipe:
            pipe.xadd(events, {"e": codec.encode_event(Failed(reason))})
            pipe.pexpire(events, self._ttl_ms)
            pipe.srem(self._key("taken", request.deployment_id), request.id)
            pipe.hdel(self._key("owners", request.deployment_id), request.id)
            pipe.delete(self._key("cancel", request.id))
            pipe.execute()

    def depth(self, deployment_id: int) -> int:
        return int(self._redis.zcard(self._key("waiting", deployment_id)))

    def in_flight(self, deployment_id: int) -> int:
        taken = self._key("taken", deployment_id)
        reap(self._redis, taken, self._key("owners", deployment_id), self.loads(deployment_id))
        return int(self._redis.scard(taken))

    def loads(self, deployment_id: int) -> dict[str, WorkerLoad]:
        reports = self._redis.hgetall(self._key("loads", deployment_id))
        return {worker.decode(): codec.decode_load(load) for worker, load in reports.items()}

    # --- worker side ---
    def take(self, deployment_id: int, worker_id: str, max_items: int, wait_s: float) -> list[SequenceRequest]:
        if max_items < 1:
            return []
        keys = [self._key("waiting", deployment_id), self._key("taken", deployment_id)]
        started = codec.encode_event(Started(worker_id))
        args = [max_items, self._key("request", ""), self._key("events", ""), started, self._ttl_ms]
        payloads = self._take(keys=keys, args=args)
        if not payloads and wait_s > 0:
            # Block until one arrives (BZPOPMIN), then put it back and take as the script does: the script is the
            # one place that moves a request from waiting to taken.
            popped = self._redis.bzpopmin(keys[0], timeout=min(wait_s, MAX_BLOCK_S))
            if popped is not None:
                self._redis.zadd(keys[0], {popped[1]: popped[2]})
                payloads = self._take(keys=keys, args=args)
        taken, expired = [], []
        for payload in payloads:
            request = codec.decode_request(payload)
            if request.timeout_s is not None and request.waited_s() >= request.timeout_s:
                expired.append((request.id, Expired(expired_message(request.waited_s()))))
            else:
                taken.append(request)
        self._deployment_of.update((request.id, deployment_id) for request in taken)
        self._reader_of.update((r.id, self._key("reader", r.reader)) for r in taken if r.reader is not None)
        if payloads:
            self._own(deployment_id, worker_id, [request.id for request in taken] + [rid for rid, _ in expired])
        self._deployment_of.update((request_id, deployment_id) for request_id, _ in expired)
        self.emit(expired)
        return taken

    def emit(self, events: list[tuple[str, Event]]) -> None:
        if not events:
            return
        with self._redis.pipeline(transaction=False) as pipe:
            for request_id, event in events:
                key = self._key("events", request_id)
                pipe.xadd(key, {"e": codec.encode_event(event)})
                pipe.pexpire(key, self._ttl_ms)
                deployment_id = self._deployment_of.pop(request_id, None) if is_last(event) else None
                if deployment_id is not None:
                    pipe.srem(self._key("taken", deployment_id), request_id)
                    pipe.hdel(self._key("owners", deployment_id), request_id)
                if is_last(event):
                    pipe.delete(self._key("cancel", request_id))
                    self._reader_of.pop(request_id, None)
            pipe.execute()

    def _own(self, deployment_id: int, worker_id: str, request_ids: list[str]) -> None:
        """Name this worker the holder of the sequences it took, and keep the taken set `ttl_s` past its last use."""
        owners, taken = self._key("owners", deployment_id), self._key("taken", deployment_id)
        with self._redis.pipeline(transaction=False) as pipe:
            if request_ids:
                pipe.hset(owners, mapping=dict.fromkeys(request_ids, worker_id))
            pipe.pexpire(owners, self._ttl_ms)
            pipe.pexpire(taken, self._ttl_ms)
            pipe.execute()

    def cancelled(self, request_ids: Iterable[str]) -> set[str]:
        ids = list(request_ids)
        if not ids:
            return set()
        leases = sorted({self._reader_of[r] for r in ids if r in self._reader_of})
        flags = self._redis.mget([self._key("cancel", r) for r in ids] + leases)  # one call per step
        gone = {lease for lease, held in zip(leases, flags[len(ids) :], strict=True) if held is None}
        unread = {r for r in ids if self._reader_of.get(r) in gone}  # their gateway died: nobody reads them
        return unread | {r for r, flag in zip(ids, flags[: len(ids)], strict=True) if flag is not None}

    def report(self, deployment_id: int, worker_id: str, load: WorkerLoad | None) -> None:
        key = self._key("loads", deployment_id)
        if load is None:
            self._redis.hdel(key, worker_id)
            return
        with self._redis.pipeline() as pipe:  # the hash outlives its workers only by `ttl_s` (a killed one's entry)
            pipe.hset(key, worker_id, codec.encode_load(load))
            pipe.pexpire(key, self._ttl_ms)
            pipe.execute()

    def close(self) -> None:
        self._lease.close()
        self._redis.close()
        self._async_clients.clear()  # each closes with its event loop

    def _async_client(self) -> redis.asyncio.Redis:
        loop = asyncio.get_running_loop()
        client = self._async_clients.get(loop)
        if client is None:
            client = self._async_clients[loop] = redis.asyncio.Redis.from_url(self._url)
        return client
