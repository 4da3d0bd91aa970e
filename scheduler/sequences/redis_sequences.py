"""The sequence transport on Redis (`LUMINAL_QUEUE_URL=redis://...`): gateways and worker processes on any
machine share it.

Per deployment, a sorted set of waiting request ids, scored by priority level then arrival (a counter), so the most
urgent and then the oldest is taken first; admission (the bound) and taking are Lua scripts (redis_scripts.py), so
replicas and workers never race on them. Each request's JSON sits under its own key until taken; the deployment's
set of taken ids is its in-flight load. Each sequence's events go to a stream of their own (XADD by the worker, a
whole step in one pipeline; XREAD BLOCK by the gateway relaying it, one call for all the sequences its event loop
relays where the lean client serves the URL: event_reader.py), and a cancel is a key with a TTL that the worker reads
with one MGET per step, in the same round trip as the step's events. Workers' load reports are a hash per
deployment, each report also announced on a pub/sub channel so that a gateway's cached view of them (load_view.py)
is read again only when one changed. A sequence routed to a worker has its
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
import contextlib
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
from luminal.scheduler.queues import resp_async, resp_sync
from luminal.scheduler.sequences import codec
from luminal.scheduler.sequences.adapter_board import RedisAdapterBoard
from luminal.scheduler.sequences.base import is_last
from luminal.scheduler.sequences.event_reader import EventReader
from luminal.scheduler.sequences.load_view import MAX_AGE_S, LoadView
from luminal.scheduler.sequences.reader_lease import READER_LEASE_S, ReaderLease
from luminal.scheduler.sequences.redis_scripts import CANCEL, SUBMIT, TAKE
from luminal.scheduler.sequences.request import SequenceRequest, WorkerLoad
from luminal.scheduler.sequences.routing import PREFERENCE_GRACE_S, REPORT_STALE_S
from luminal.scheduler.sequences.taken_owners import reap
from luminal.scheduler.work import effective_priority

log = logging.getLogger(__name__)
MAX_BLOCK_S = 1.0  # one blocking call's longest wait, well under any socket timeout
# How long the report notices' thread waits on its socket between looks at its stop flag, so how long close() may
# wait for it (at MAX_BLOCK_S a gateway took up to a second to stop). The wait is local: no Redis traffic.
NOTICES_POLL_S = 0.2
DEFAULT_TTL_S = 3600.0  # how long a request, its events and a cancel are kept: past any sequence's lifetime
ARRIVALS = 1 << 40  # a level's score span: arrivals counted below it order requests within their level

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
        # Where the lean client serves the URL, one reader per loop reads all its sequences' events in one call.
        self._lean = resp_async.supports(url)
        self._lean_sync = resp_sync.SyncRespClient(url) if self._lean else None  # a worker's per-step calls
        self._readers: dict[asyncio.AbstractEventLoop, EventReader] = {}
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
        if not self._lean:
            async for event in self._events_alone(request_id):
                yield event
            return
        async with contextlib.aclosing(self._event_reader().entries(self._key("events", request_id))) as entries:
            async for fields in entries:
                event = codec.decode_event(_field(fields, b"e"))
                yield event
                if is_last(event):
                    return

    async def _events_alone(self, request_id: str) -> AsyncIterator[Event]:
        """`events` through redis.asyncio, one XREAD per sequence (a URL the lean client does not serve)."""
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
            self._notices = listener.run_in_thread(sleep_time=NOTICES_POLL_S, daemon=True,
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
    def take(
        self, deployment_id: int, worker_id: str, max_items: int, wait_s: float, worker_started_at: float | None = None
    ) -> list[SequenceRequest]:
        if max_items < 1:
            return []
        d = deployment_id
        keys = [self._key("waiting", d), self._key("taken", d), self._key("preferences", d),
                self._key("backlog", d), self._key("loads", d)]  # fmt: skip
        started = codec.encode_event(Started(worker_id, worker_started_at))
        args = [max_items, self._key("request", ""), self._key("events", ""), started, self._ttl_ms, worker_id,
                SCAN, REPORT_STALE_S]  # fmt: skip
        deadline = time.monotonic() + wait_s
        payloads = self._take_script(keys, args)
        while not payloads and (left := deadline - time.monotonic()) > 0:
            if self._redis.zcard(keys[0]):  # others' sequences wait: look again as their graces run out
                time.sleep(min(left, POLL_S))
            else:
                # Block until one arrives (BZPOPMIN), then put it back and take as the script does: the script is
                # the one place that moves a request from waiting to taken.
                popped = self._redis.bzpopmin(keys[0], timeout=min(left, MAX_BLOCK_S))
                if popped is not None:
                    self._redis.zadd(keys[0], {popped[1]: popped[2]})
            payloads = self._take_script(keys, args)
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

    def _take_script(self, keys: list, args: list) -> list:
        """The take script (a busy worker runs it every step while its batch has rows free): through the lean
        client where it serves the URL."""
        if self._lean_sync is not None:
            return self._lean_sync.evalsha(TAKE.encode(), keys, args)
        return self._take(keys=keys, args=args)

    def emit(self, events: list[tuple[str, Event]], watch: Iterable[str] = ()) -> set[str]:
        watched = list(watch)
        commands = self._event_commands(events)
        if watched:  # the next round's cancels, read in the same round trip as this round's events
            keys, leases = self._cancel_keys(watched)
            commands.append(("MGET", *keys))
        if not commands:
            return set()
        replies = self._send_together(commands)
        return self._cancelled_of(watched, leases, replies[-1]) if watched else set()

    def _event_commands(self, events: list[tuple[str, Event]]) -> list[tuple]:
        """Each event appended to its sequence's stream; a sequence that ends no longer counted as taken."""
        commands: list[tuple] = []
        for request_id, event in events:
            key = self._key("events", request_id)
            commands += [("XADD", key, "*", "e", codec.encode_event(event)), ("PEXPIRE", key, self._ttl_ms)]
            if is_last(event):
                deployment_id = self._deployment_of.pop(request_id, None)
                if deployment_id is not None:
                    commands.append(("SREM", self._key("taken", deployment_id), request_id))
                    commands.append(("HDEL", self._key("owners", deployment_id), request_id))
                commands.append(("DEL", self._key("cancel", request_id)))
                self._reader_of.pop(request_id, None)
        return commands

    def _send_together(self, commands: list[tuple]) -> list:
        """Commands in one round trip (a worker's step), their replies: through the lean client where it serves the
        URL, sparing the step loop redis-py's layers per command (resp_sync.py)."""
        if self._lean_sync is not None:
            return self._lean_sync.pipeline(commands)
        with self._redis.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return pipe.execute()

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
        keys, leases = self._cancel_keys(ids)
        flags = self._lean_sync.call("MGET", *keys) if self._lean_sync is not None else self._redis.mget(keys)
        return self._cancelled_of(ids, leases, flags)

    def _cancel_keys(self, request_ids: list[str]) -> tuple[list[str], list[str]]:
        """The keys one MGET reads to learn which of the sequences are cancelled: each one's cancel key, then the
        reader leases of their gateways (the leases too, apart)."""
        leases = sorted({self._reader_of[r] for r in request_ids if r in self._reader_of})
        return [self._key("cancel", r) for r in request_ids] + leases, leases

    def _cancelled_of(self, request_ids: list[str], leases: list[str], flags: list) -> set[str]:
        """Which sequences the MGET of `_cancel_keys` found cancelled, or relayed by a gateway whose lease lapsed."""
        n = len(request_ids)
        gone = {lease for lease, held in zip(leases, flags[n:], strict=True) if held is None}
        unread = {r for r in request_ids if self._reader_of.get(r) in gone}  # their gateway died: nobody reads them
        return unread | {r for r, flag in zip(request_ids, flags[:n], strict=True) if flag is not None}

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
            notices.stop()  # closes its connection within NOTICES_POLL_S
        self._lease.close()
        if self._lean_sync is not None:
            self._lean_sync.close()
        self._redis.close()
        self._async_clients.clear()  # each closes with its event loop
        self._readers.clear()

    def _event_reader(self) -> EventReader:
        loop = asyncio.get_running_loop()
        reader = self._readers.get(loop)
        if reader is None:
            for stale in [other for other in self._readers if other.is_closed()]:
                del self._readers[stale]
            client = resp_async.RespClient(self._url)
            wake = EventReader.wake_key_for(self._key("wake", ""))
            reader = self._readers[loop] = EventReader(client.call_blocking, client.call, wake, self._ttl_ms)
        return reader

    def _async_client(self) -> redis.asyncio.Redis:
        loop = asyncio.get_running_loop()
        client = self._async_clients.get(loop)
        if client is None:
            client = self._async_clients[loop] = redis.asyncio.Redis.from_url(self._url)
        return client


def _field(fields: list, name: bytes) -> bytes:
    """A stream entry's field from its flat [name, value, ...] list; ValueError when it has none."""
    for k in range(0, len(fields) - 1, 2):
        if fields[k] == name:
            return fields[k + 1]
    raise ValueError(f"a sequence event entry has no field {name!r}")


def _log_notice_error(error: Exception, listener, thread) -> None:
    """A failed read of the announcements (Redis away): the next one reconnects; the view's max age covers the gap."""
    log.warning("reading the load reports' announcements failed: %s", error)
    time.sleep(MAX_BLOCK_S)
