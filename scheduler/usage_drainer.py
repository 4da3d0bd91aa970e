"""The usage drainer: moves the usage records that worker processes stored in Redis with their answers into the
SQL ledger, off the answer path. Every gateway on a Redis queue runs one; the usage table stays the truth for
billing reports.

Exactly once, whatever is killed when:
- A worker stores a batch's answers and its usage record in one Lua call (`COMPLETE` in `redis_lua.py`), so
  both exist or neither: a worker killed before it leaves its requests pending, to be re-run and billed then.
- The usage stream has one consumer group, `drainers`, so each entry goes to one drainer at a time. The drainer
  writes it to the database (idempotent: batch ids and request ids are the ledger's unique keys), and only then
  acknowledges and deletes it, in one MULTI. A drainer killed in between leaves the entry pending under its
  name: its restart reads what it holds first, and any drainer claims an entry idle for `claim_idle_s`. Writing
  it again bills nothing twice.

How long usage lags: one gather window (`gather_s`, 250 ms) plus one transaction while all is well; a drainer
killed mid-drain delays what it held by `claim_idle_s` (5 s); while the database is down the records wait in
Redis. A report calls `flush()` first, which returns once every record stored before the call is in the
database, so reports do not lag.

Persistence assumed: Redis keeps the usage stream as it keeps the queues and results, so it needs AOF
(`appendonly yes`): with `appendfsync always` a restart or crash loses nothing; with `everysec` a crash of the
machine loses up to a second of writes, answers and their records together (a script's writes are logged as one
MULTI). Without persistence a Redis restart loses the records not yet drained, with the queued requests.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from luminal.scheduler import usage_journal
from luminal.scheduler.billing import UsageLedger, UsageRecord
from luminal.scheduler.queues.redis_streams import usage_stream

log = logging.getLogger(__name__)
GROUP = "drainers"
GATHER_S = 0.25  # after the first record, how long more may gather into one transaction (a flush does not wait)
MAX_RECORDS = 500  # per transaction
CLAIM_IDLE_S = 5.0  # an entry another drainer has held this long unacknowledged is claimed (that drainer died)
# One blocking read's longest wait, which is how long close() may wait for the thread: as short as an idle worker's
# IDLE_WAIT_S (at 1 s every gateway on Redis took up to a second to stop); an idle read costs Redis next to nothing.
BLOCK_MS = 200
RETRY_S = (0.1, 0.5, 2.0, 5.0)  # pauses after failed rounds (database or Redis down)
FLUSH_POLL_S = 0.005


class UsageDrainer:
    def __init__(
        self,
        url: str,
        namespace: str,
        ledger: UsageLedger,
        consumer: str,
        claim_idle_s: float = CLAIM_IDLE_S,
        gather_s: float = GATHER_S,
        max_records: int = MAX_RECORDS,
    ):
        if max_records < 1:
            raise ValueError(f"max_records must be at least 1, got {max_records}")
        self._redis = redis.Redis.from_url(url)
        self._stream = usage_stream(namespace)
        self.ledger, self.consumer = ledger, consumer
        self.claim_idle_s, self.gather_s, self.max_records = claim_idle_s, gather_s, max_records
        self._holding = True  # this consumer may hold entries from a failed round or an earlier process
        self._grouped = False
        self._last_claim = float("-inf")
        self._stopping = threading.Event()
        self._hurry = threading.Event()  # set while a flush waits: no gathering
        self._flushers = 0
        self._flushers_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> UsageDrainer:
        self._thread = threading.Thread(target=self._run, name="usage-drainer", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Stop draining; what is left waits in Redis for the next drainer."""
        self._stopping.set()
        self._hurry.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._redis.close()

    def backlog(self) -> int:
        """Usage records stored in Redis and not yet in the database."""
        return int(self._redis.xlen(self._stream))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every usage record stored before this call is in the database; False after `timeout`."""
        newest = self._redis.xrevrange(self._stream, count=1)
        if not newest:
            return True
        mark, deadline = newest[0][0], time.monotonic() + timeout
        with self._flushers_lock:
            self._flushers += 1
            self._hurry.set()
        try:
            while self._redis.xrange(self._stream, "-", mark, count=1):  # deleted once written, so: not yet
                if time.monotonic() > deadline:
                    return False
                drained = 0
                if self._thread is None or not self._thread.is_alive():
                    drained = self.drain_once()  # nobody drains in the background: the caller does
                if not drained:
                    time.sleep(FLUSH_POLL_S)
            return True
        finally:
            with self._flushers_lock:
                self._flushers -= 1
                if self._flushers == 0 and not self._stopping.is_set():
                    self._hurry.clear()

    def drain_once(self, block_ms: int = 0) -> int:
        """One round: the entries this drainer holds unacknowledged (a failed round's, or an earlier process's),
        else those another drainer left idle for `claim_idle_s`, else new ones (waiting up to `block_ms` for the
        first); written to the ledger, then acknowledged and deleted. The number of entries drained. A failure
        (database or Redis down) raises, and the entries stay pending under this drainer for its next round."""
        self._ensure_group()
        entries = self._read("0") if self._holding else []
        self._holding = bool(entries)
        if not entries:
            entries = self._claim_idle()
        if not entries:
            entries = self._read(">", block_ms)
            if entries and len(entries) < self.max_records and self.gather_s > 0 and not self._hurry.is_set():
                self._hurry.wait(self.gather_s)  # let a busy moment's records share one transaction
                entries += self._read(">")
        if not entries:
            return 0
        self._holding = True  # until they are acknowledged
        usage_journal.write_records(self.ledger, [r for r in map(_decode, entries) if r is not None])
        ids = [entry_id for entry_id, _ in entries]
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.xack(self._stream, GROUP, *ids)
            pipe.xdel(self._stream, *ids)
            pipe.execute()
        self._holding = False
        return len(entries)

    def _ensure_group(self) -> None:
        if self._grouped:
            return
        try:  # from id 0: records a worker stored before any drainer existed are drained too
            self._redis.xgroup_create(self._stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise
        self._grouped = True

    def _read(self, start: str, block_ms: int = 0) -> list[tuple[bytes, dict]]:
        """Entries from `start` ('0': those this consumer holds; '>': new ones)."""
        block = block_ms if start == ">" and block_ms > 0 else None
        try:
            reply = self._redis.xreadgroup(
                GROUP, self.consumer, {self._stream: start}, count=self.max_records, block=block
            )
        except redis.ResponseError as e:
            if "NOGROUP" in str(e):  # the stream was deleted (a namespace wiped): made again next round
                self._grouped = False
                return []
            raise
        return [(entry_id, fields) for _, entries in reply or [] for entry_id, fields in entries if fields]

    def _claim_idle(self) -> list[tuple[bytes, dict]]:
        now = time.monotonic()
        if now - self._last_claim < self.claim_idle_s / 2:
            return []
        self._last_claim = now
        idle_ms = max(0, int(self.claim_idle_s * 1000))
        reply = self._redis.xautoclaim(self._stream, GROUP, self.consumer, idle_ms, "0-0", count=self.max_records)
        return [(entry_id, fields) for entry_id, fields in reply[1] if fields]

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                self.drain_once(BLOCK_MS)
                failures = 0
            except Exception:
                pause = RETRY_S[min(failures, len(RETRY_S) - 1)]
                log.warning("draining usage records failed; retrying in %g s", pause, exc_info=True)
                failures += 1
                self._stopping.wait(pause)


def _decode(entry: tuple[bytes, dict]) -> UsageRecord | None:
    entry_id, fields = entry
    try:
        return usage_journal.decode(fields[b"record"])
    except (KeyError, ValueError, TypeError) as e:  # not a record any worker wrote: it never can be billed
        log.error("usage entry %r is not a usage record (%s), dropped: %.300r", entry_id, e, fields)
        return None
