"""The buffered ledger: records reach the real ledger in order, flush() waits for them, a failing database is
retried (exactly once still, by batch id), and close() writes what is buffered."""

from __future__ import annotations

import threading

from luminal.scheduler import ledger_writer
from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.ledger_writer import BufferedLedger


def record(i: int) -> UsageRecord:
    return UsageRecord(f"b{i}", 1, 1, "w", "cpu", 10.0 + i, 10.5 + i, (f"r{i}",), (1,))


class FlakyLedger:
    def __init__(self, failures: int = 0, gate: threading.Event | None = None):
        self.written: dict[str, UsageRecord] = {}
        self.failures, self.gate, self.calls = failures, gate, 0

    def record(self, r: UsageRecord) -> bool:
        if self.gate is not None:
            self.gate.wait(10)
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise ConnectionError("database unreachable")
        if r.batch_id in self.written:
            return False
        self.written[r.batch_id] = r
        return True


def test_flush_waits_until_every_record_is_written_in_order():
    gate = threading.Event()
    inner = FlakyLedger(gate=gate)
    ledger = BufferedLedger(inner)
    for i in range(5):
        assert ledger.record(record(i))
    assert not ledger.flush(timeout=0.1)  # the database is slow: not yet
    gate.set()
    assert ledger.flush(timeout=10)
    assert list(inner.written) == [f"b{i}" for i in range(5)]
    ledger.close()


def test_a_failing_database_is_retried_and_nothing_is_billed_twice():
    inner = FlakyLedger(failures=2)
    ledger = BufferedLedger(inner)
    ledger.record(record(1))
    ledger.record(record(1))  # the same batch reported twice
    assert ledger.flush(timeout=10)
    assert list(inner.written) == ["b1"] and inner.calls == 4
    ledger.close()


def test_close_writes_what_is_buffered():
    gate = threading.Event()
    inner = FlakyLedger(gate=gate)
    ledger = BufferedLedger(inner)
    for i in range(3):
        ledger.record(record(i))
    threading.Timer(0.1, gate.set).start()
    ledger.close()
    assert len(inner.written) == 3


def test_only_a_writer_waiting_for_a_first_record_is_woken(monkeypatch):
    # A wake per record would hand the GIL to the writer as each batch is answered; one gathering wakes at its
    # deadline anyway.
    notified = []

    class CountingCondition(threading.Condition):
        def notify_all(self):
            notified.append(self)
            super().notify_all()

    monkeypatch.setattr(ledger_writer.threading, "Condition", CountingCondition)
    gate = threading.Event()  # the database holds the first write: the writer is busy with records in hand
    inner = FlakyLedger(gate=gate)
    ledger = BufferedLedger(inner)
    for i in range(5):
        ledger.record(record(i))
    # The first record woke it; the others found it busy with that one.
    assert [c for c in notified if c is ledger._cond] == [ledger._cond]
    gate.set()
    assert ledger.flush(timeout=10)
    assert list(inner.written) == [f"b{i}" for i in range(5)]
    ledger.close()
