"""The sequence transport on Redis (`LUMINAL_QUEUE_URL=redis://...`): gateways and worker processes on any
machine share it.

Per deployment, a sorted set of waiting request ids, scored by priority level then arrival (a counter), so the most
urgent and then the oldest is taken first; admission (the bound) and taking are Lua scripts, so replicas and
workers never race on them. Each request's JSON sits under its own key until taken; the deployment's set of taken
ids is its in-flight load. Each sequence's events go to a stream of their own (XADD by the worker, a whole step in
one pipeline; XREAD BLOCK by the gateway relaying it), and a cancel is a key with a TTL that the worker reads
with one MGET per step. Workers' load reports are a hash per deployment, each report also announced on a pub/sub
channel so that a gateway's cached view of them (load_view.py) is read again only when one changed. A sequence
routed to a worker has its
preference in a hash (the worker and the end of its grace, in Redis' own clock, so gateways' clocks never matter;
a report's age is its worker's clock against Redis', within REPORT_STALE_S) and counts in that worker's backlog;
the take script skips those a worker may not take yet (routing.others_may_take and may_take_adapter, decided
on the load reports it reads in the same step). Requests, event streams, cancels, preferences and load reports
expire (`ttl_s`), so
none that a dead gateway or worker left behind stays; so do a deployment's waiting set, arrivals counter and taken
set, `ttl_s` after their last use (a deleted deployment's). The taken set's entries of dead workers are dropped
when the load is read (taken_owners.py). Expired sequences are ended by the worker that takes them (the deadline
is counted from the request's arrival), or by the gateway's relay when none does (RelayedStream). Each gateway
holds a reader lease (reader_lease.py) named in the requests it submits: a worker drops the sequences whose
gateway's lease lapsed, as if cancelled (read with the cancels).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping

import redis
import redis.asyncio

from luminal.scheduler.generation.stream import Event, Expired, Failed, Started, expired_message
from luminal.scheduler.generation.waiting import EngineBusy
from luminal.scheduler.sequences import codec
from luminal.scheduler.sequences.adapter_board import RedisAdapterBoard
from luminal.scheduler.sequences.base import is_last
from luminal.scheduler.sequences.load_view import MAX_AGE_S, LoadView
from luminal.scheduler.sequences.reader_lease import READER_LEASE_S, ReaderLease
from luminal.scheduler.sequences.request import SequenceRequest, WorkerLoad
from luminal.scheduler.sequences.routing import PREFERENCE_GRACE_S, REPORT_STALE_S
from luminal.scheduler.sequences.taken_owners import reap
from luminal.scheduler.work import effective_priority

log = logging.getLogger(__name__)
MAX_BLOCK_S = 1.0  # one blocking call's longest wait, well under any socket timeout
DEFAULT_TTL_S = 3600.0  # how long a request, its events and a cancel are kept: past any sequence's lifetime
ARRIVALS = 1 << 40  # a level's score span: arrivals counted below it order requests within their level

# Redis' clock in milliseconds, for the preferences' graces.
NOW_MS = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""
# KEYS: waiting set, request key, arrivals counter, preferences hash, backlog hash. ARGV: request id, level, max
# waiting, payload, ttl ms, preferred worker ('' for none), grace ms, LoRA adapter ('' for the base). Returns -1 when
# queued, else the count already waiting (refused). A preference reads `worker|grace end ms|adapter`.
SUBMIT = (
    NOW_MS
    + """
local waiting = redis.call('ZCARD', KEYS[1])
if waiting >= tonumber(ARGV[3]) then return waiting end
local arrival = redis.call('INCR', KEYS[3]) % 1099511627776
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) * 1099511627776 + arrival, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[6] .. '|' .. (now_ms() + tonumber(ARGV[7])) .. '|' .. ARGV[8])
  redis.call('HINCRBY', KEYS[5], ARGV[6], 1)
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
  redis.call('PEXPIRE', KEYS[5], ARGV[5])
end
return -1
"""
)
# Forgets a waiting sequence's preference, if it has one (KEYS: preferences hash, backlog hash; the id is `id`).
FORGET_PREFERENCE = """
local function forget_preference(id)
  local preference = redis.call('HGET', KEYS[3], id)
  if not preference then return nil end
  local worker = string.sub(preference, 1, string.find(preference, '|', 1, true) - 1)
  redis.call('HDEL', KEYS[3], id)
  if redis.call('HINCRBY', KEYS[4], worker, -1) <= 0 then redis.call('HDEL', KEYS[4], worker) end
  return preference
end
"""
# KEYS: waiting set, taken set, preferences hash, backlog hash, loads hash. ARGV: max items, request key prefix,
# event stream prefix, the encoded Started event naming the worker, ttl ms, the worker's id, how many of the
# line's first ids to look at, stale seconds. Returns the taken requests' payloads (a request whose key expired is
# skipped). Each taken sequence's stream gets the Started event in the same step: a worker killed right after
# taking it is still known as the one that took it, so the gateway relaying it notices its death.
TAKE = (
    NOW_MS
    + FORGET_PREFERENCE
    + """
local now = now_ms()
local reports = {}  -- worker -> its decoded live load report, or false (none, or stale)
local function live_report(worker)
  if reports[worker] == nil then
    local report = redis.call('HGET', KEYS[5], worker)
    local load = report and cjson.decode(report)
    reports[worker] = (load and now / 1000 - load['reported_at'] <= tonumber(ARGV[8])) and load or false
  end
  return reports[worker]
end
local open = {}  -- worker -> whether others may take its sequences (routing.others_may_take), as at the first ask
local function others_may_take(worker)
  if open[worker] == nil then
    local load = live_report(worker)
    local backlog = tonumber(redis.call('HGET', KEYS[4], worker) or '0')
    open[worker] = (not load) or (type(load['free_rows']) == 'number' and backlog > load['free_rows'])
  end
  return open[worker]
end
local function holds(load, adapter)
  for _, pair in ipairs(load and load['adapters'] or {}) do
    if pair[1] == adapter then return true end
  end
  return false
end
local function may_take_adapter(adapter, preferred)  -- routing.may_take_adapter, for this worker (ARGV[6])
  if adapter == '' or not holds(live_report(preferred), adapter) then return true end
  return holds(live_report(ARGV[6]), adapter)
end
local taken = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[7]) - 1)) do
  if #taken >= tonumber(ARGV[1]) then break end
  local preference = redis.call('HGET', KEYS[3], id)
  local may = true
  if preference then
    local worker, grace, adapter = string.match(preference, '^([^|]*)|([^|]*)|?(.*)$')
    grace = tonumber(grace)
    may = worker == ARGV[6] or ((now >= grace or others_may_take(worker)) and may_take_adapter(adapter, worker))
  end
  if may then
    redis.call('ZREM', KEYS[1], id)
    forget_preference(id)
    local key = ARGV[2] .. id
    local payload = redis.call('GET', key)
    if payload then
      redis.call('DEL', key)
      redis.call('SADD', KEYS[2], id)
      local events = ARGV[3] .. id
      redis.call('XADD', events, '*', 'e', ARGV[4])
      redis.call('PEXPIRE', events, ARGV[5])
      table.insert(taken, payload)
    end
  end
end
return taken
"""
)
# KEYS: waiting set, request key, preferences hash, backlog hash, cancel key. ARGV: request id, ttl ms.
CANCEL = (
    FORGET_PREFERENCE
    + """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then forget_preference(ARGV[1]) end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[5], 1, 'PX', ARGV[2])
"""
)
SCAN = 256  # ids at the front of a line a take looks at: enough to pass those waiting for other workers
POLL_S = 0.02  # how often a take waiting on a line of others' sequences looks again (their graces end)


class RedisSequences:
    def __init__(
        self,
        url: str,
        namespace: str = "lm",
        ttl_s: float = DEFAULT_TTL_S,
        reader_lease_s: float = READER_LEASE_S,
        view_max_age_s: float = MAX_AGE_S,  # of `recent_loads`' copies (load_view.py)
    ):
        self._url, self._ns = url, namespace
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._redis = redis.Redis.from_url(url)
        self._submit = self._redis.register_script(SUBMIT)
        self._take = self._redis.register_script(TAKE)
        self._cancel = self._redis.register_script(CANCEL)
        self.adapters = RedisAdapterBoard(self._redis, namespace)
        # redis.asyncio clients belong to the event loop they were made on: one per loop that reads events.
        self._async_clients: dict[asyncio.AbstractEventLoop, redis.asyncio.Redis] = {}
        self._deployment_of: dict[str, int] = {}  # the deployment of each sequence this worker took, until it ends
        self._reader_of: dict[str, str] = {}  # the reader lease key of each sequence this worker took, until it ends
        self.reader_id = uuid.uuid4().hex  # this gateway's, held from its first submit
        self._lease = ReaderLease(self._redis, self._key("reader", self.reader_id), reader_lease_s)
        self._view = LoadView(self.loads, view_max_age_s)
        self._notices = None  # the thread hearing of new reports, started by the first `recent_loads` (a gateway's)
        self._notices_lock = threading.Lock()

    def _key(self, *parts: object) -> str:
        return ":".join([self._ns, "seq", *map(str, parts)])

    # --- gateway side ---
    def submit(self, request: SequenceRequest, max_waiting: int) -> None:
        self._lease.hold()
        if request.reader is None:
            request = dataclasses.replace(request, reader=self.reader_id)
        d = request.deployment_id
        keys = [self._key("waiting", d), self._key("request", request.id), self._key("arrivals", d),
                self._key("preferences", d), self._key("backlog", d)]  # fmt: skip
        args = [request.id, effective_priority(request.priority), max_waiting, codec.encode_request(request)]
        grace_ms = int(PREFERENCE_GRACE_S * 1000)
        preference = [request.preferred_worker or "", grace_ms, request.params.lora or ""]
        waiting = self._submit(keys=keys, args=[*args, self._ttl_ms, *preference])
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
        # Still waiting: out of its line (no worker will take it now); either way its worker sees the cancel key.
        d = codec.decode_request(payload).deployment_id if payload is not None else None
        keys = [self._key("waiting", d), self._key("request", request_id), self._key("preferences", d),
                self._key("backlog", d), self._key("cancel", request_id)]  # fmt: skip
        self._cancel(keys=keys, args=[request_id, self._ttl_ms])

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

    def recent_loads(self, deployment_id: int) -> Mapping[str, WorkerLoad]:
        self._hear_reports()
        return self._view.loads(deployment_id)

    def _hear_reports(self) -> None:
        """Listen (once, on a thread) for the reports' announcements, each telling the view its deployment's copy
        is stale. A lost one (a reconnect) only delays a read by the view's max age."""
        with self._notices_lock:
            if self._notices is not None:
                return
            listener = self._redis.pubsub(ignore_subscribe_messages=True)
            listener.subscribe(**{self._key("reports"): self._on_report})
            self._notices = listener.run_in_thread(sleep_time=MAX_BLOCK_S, daemon=True,
                                                   exception_handler=_log_notice_error)  # fmt: skip

    def _on_report(self, message: dict) -> None:
        try:
            deployment_id = int(message["data"])
        except (TypeError, ValueError):  # not ours: a report names its deployment by id
            return
        self._view.published(deployment_id)

    def backlog(self, deployment_id: int) -> dict[str, int]:
        counts = self._redis.hgetall(self._key("backlog", deployment_id))
        return {worker.decode(): int(n) for worker, n in counts.items() if int(n) > 0}

    # --- worker side ---
    def take(self, deployment_id: int, worker_id: str, max_items: int, wait_s: float) -> list[SequenceRequest]:
        if max_items < 1:
            return []
        d = deployment_id
        keys = [self._key("waiting", d), self._key("taken", d), self._key("preferences", d),
                self._key("backlog", d), self._key("loads", d)]  # fmt: skip
        started = codec.encode_event(Started(worker_id))
        args = [max_items, self._key("request", ""), self._key("events", ""), started, self._ttl_ms, worker_id,
                SCAN, REPORT_STALE_S]  # fmt: skip
        deadline = time.monotonic() + wait_s
        payloads = self._take(keys=keys, args=args)
        while not payloads and (left := deadline - time.monotonic()) > 0:
            if self._redis.zcard(keys[0]):  # others' sequences wait: look again as their graces run out
                time.sleep(min(left, POLL_S))
            else:
                # Block until one arrives (BZPOPMIN), then put it back and take as the script does: the script is
                # the one place that moves a request from waiting to taken.
                popped = self._redis.bzpopmin(keys[0], timeout=min(left, MAX_BLOCK_S))
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
        with self._redis.pipeline() as pipe:  # the hash outlives its workers only by `ttl_s` (a killed one's entry)
            if load is None:
                pipe.hdel(key, worker_id)
            else:
                pipe.hset(key, worker_id, codec.encode_load(load))
                pipe.pexpire(key, self._ttl_ms)
            pipe.publish(self._key("reports"), deployment_id)  # gateways' cached views read it again
            pipe.execute()

    def close(self) -> None:
        with self._notices_lock:
            notices, self._notices = self._notices, None
        if notices is not None:
            notices.stop()  # closes its connection within MAX_BLOCK_S
        self._lease.close()
        self._redis.close()
        self._async_clients.clear()  # each closes with its event loop

    def _async_client(self) -> redis.asyncio.Redis:
        loop = asyncio.get_running_loop()
        client = self._async_clients.get(loop)
        if client is None:
            client = self._async_clients[loop] = redis.asyncio.Redis.from_url(self._url)
        return client


def _log_notice_error(error: Exception, listener, thread) -> None:
    """A failed read of the announcements (Redis away): the next one reconnects; the view's max age covers the gap."""
    log.warning("reading the load reports' announcements failed: %s", error)
    time.sleep(MAX_BLOCK_S)
