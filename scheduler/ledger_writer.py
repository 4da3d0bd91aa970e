"""Usage records written off the serving path: a worker hands each executed batch's record to this writer and
answers its requests at once; one thread writes the records, retrying a failing database.

Billing stays exactly once (batch and request ids are the ledger's keys, so a retried write is a no-op), and
`flush()` lets a reader in the same process (the usage report of the embedded platform) see every batch
answered so far. Nothing is lost when the process is killed: given a journal, `record()` appends the record to
it before returning, so before the batch's answers are released, and the next start replays it
(`scheduler/usage_journal.py`). A journal segment is deleted once its records are in the database.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from luminal.scheduler.billing import LedgerError, UsageLedger, UsageRecord
from luminal.scheduler.usage_journal import UsageJournal

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = (0.05, 0.2, 1.0, 5.0)
GATHER_S = 0.05
MAX_GATHERED = 500


class BufferedLedger:
    def __init__(self, ledger: UsageLedger, journal: UsageJournal | None = None):
        self.ledger, self.journal = ledger, journal
        # Set when a record could not be written for a while (the database is down): the journal is then kept
        # whole, for the next start to replay.
        self._gave_up = False
        self._pending: deque[UsageRecord] = deque()
        self._written = 0  # records written (or given up on) so far, for flush()
        self._queued = 0
        self._cond = threading.Condition()
        self._closing = False
        self._flushers = 0  # callers waiting in flush(): the writer does not gather while they wait
        self._thread = threading.Thread(target=self._run, name="usage-ledger", daemon=True)
        self._thread.start()

    def record(self, record: UsageRecord) -> bool:
        with self._cond:
            if self._closing:
                raise RuntimeError("the usage ledger is closed")
            if self.journal is not None:
                try:
                    self.journal.append(record)
                except OSError:  # a full disk: the record is still written from memory, unless the process dies
                    log.exception("usage record of batch %s not journaled", record.batch_id)
            self._pending.append(record)
            self._queued += 1
            # Only a writer waiting for a first record needs waking (or a full gather): one gathering already
            # wakes at its deadline. A wake per record would cost the serving threads a GIL hand-off per batch,
            # just as they answer it.
            if len(self._pending) == 1 or len(self._pending) >= MAX_GATHERED:
                self._cond.notify_all()
        return True

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every record handed in so far is written; False if that took longer than `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._queued
            self._flushers += 1
            self._cond.notify_all()
            try:
                while self._written < target:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            finally:
                self._flushers -= 1
        return True

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        with self._cond:
            kept = "kept in the journal for the next start" if self.journal is not None else "lost"
            for record in self._pending:
                log.error("usage record of batch %s not written at close (%s): %r", record.batch_id, kept, record)
            if self.journal is not None:
                self.journal.close(all_written=not self._pending and not self._gave_up)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
                # Records gather for a moment and go in one transaction: a write holds the GIL for a while, and
                # fewer, larger ones disturb the serving threads less. A flush or close does not wait.
                deadline = time.monotonic() + GATHER_S
                while not self._closing and self._flushers == 0 and len(self._pending) < MAX_GATHERED:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                records = list(self._pending)[:MAX_GATHERED]
            self._write(records)
            with self._cond:
                for _ in records:
                    self._pending.popleft()
                self._written += len(records)
                if self.journal is not None and not self._gave_up:
                    self.journal.release(self._written)
                self._cond.notify_all()

    def _write(self, records: list[UsageRecord]) -> None:
        record_many = getattr(self.ledger, "record_many", None)
        if record_many is not None and len(records) > 1:
            try:
                record_many(records)
                return
            except Exception:  # one bad record (or a database hiccup): each alone, with retries
                log.warning("writing %d usage records together failed; writing them one by one", len(records))
        for record in records:
            self._write_one(record)

    def _write_one(self, record: UsageRecord) -> None:
        for attempt, pause in enumerate((*RETRY_BACKOFF_S, None)):
            try:
                self.ledger.record(record)
                return
            except LedgerError:  # it can never be billed: writing it again would fail the same way
                log.exception("usage record of batch %s refused by the ledger: %r", record.batch_id, record)
                return
            except Exception:
                if pause is None or (self._closing and attempt >= 1):
                    log.exception("usage record of batch %s NOT written: %r", record.batch_id, record)
                    self._gave_up = True
                    return
                time.sleep(pause)
