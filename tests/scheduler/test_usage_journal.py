"""The usage journal: a buffered record survives a SIGKILL of its process (its write returned before the
record() call did), the next start bills it once however often it is replayed, a torn last line is dropped, a
live process's segment is left alone, and written segments are deleted."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from luminal.scheduler.ledger import SqlUsageLedger
from luminal.scheduler.ledger_writer import BufferedLedger
from luminal.scheduler.usage_journal import UsageJournal, encode, replay
from tests.scheduler.ledger_world import PRICES, rows, usage
from tests.scheduler.test_ledger_writer import FlakyLedger, record

ROOT = Path(__file__).resolve().parents[2]


def test_records_buffered_when_the_process_is_killed_are_replayed_once(tmp_path: Path, world):
    db, tenant_id, deployment_id = world
    journal = tmp_path / "journal"
    # A child process buffers 50 records behind a database that never answers, and is killed.
    child = textwrap.dedent(f"""
        import os, signal, threading
        from pathlib import Path
        from luminal.scheduler.ledger_writer import BufferedLedger
        from luminal.scheduler.usage_journal import UsageJournal
        from tests.scheduler.ledger_world import usage
        from tests.scheduler.test_ledger_writer import FlakyLedger

        ledger = BufferedLedger(FlakyLedger(gate=threading.Event()), UsageJournal(Path({str(journal)!r}), 4096))
        for i in range(50):
            ids = (f"r{{i}}", f"s{{i}}")
            ledger.record(usage({tenant_id}, {deployment_id}, batch_id=f"b{{i}}", request_ids=ids, request_rows=(1, 2)))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert len(list(journal.iterdir())) > 1  # several segments, none of them written
    ledger = SqlUsageLedger(db, PRICES)
    # One record had reached the database before the kill.
    ledger.record(usage(tenant_id, deployment_id, batch_id="b3", request_ids=("r3", "s3"), request_rows=(1, 2)))
    assert replay(journal, ledger) == 49
    assert list(journal.iterdir()) == []
    assert replay(journal, ledger) == 0
    billed = [rid for row in rows(db) for rid in row.request_ids]
    assert sorted(billed) == sorted({f"{p}{i}" for i in range(50) for p in "rs"})


def test_a_torn_last_line_is_dropped_and_the_rest_billed(tmp_path: Path, world):
    db, tenant_id, deployment_id = world
    tmp_path.joinpath("usage-1-1-000001.jsonl").write_bytes(
        encode(usage(tenant_id, deployment_id, batch_id="whole")) + encode(usage(tenant_id, deployment_id))[:40]
    )
    assert replay(tmp_path, SqlUsageLedger(db, PRICES)) == 1
    assert [r.batch_id for r in rows(db)] == ["whole"]


def test_a_live_process_keeps_its_segment_and_deletes_what_is_written(tmp_path: Path):
    gate = threading.Event()
    inner = FlakyLedger(gate=gate)
    ledger = BufferedLedger(inner, UsageJournal(tmp_path, segment_bytes=512))
    for i in range(20):
        ledger.record(record(i))
    assert len(list(tmp_path.iterdir())) > 2
    other = FlakyLedger()
    assert replay(tmp_path, other) == 0 and other.written == {}  # every segment is held by its writer
    gate.set()
    assert ledger.flush(timeout=10)
    assert len(list(tmp_path.iterdir())) == 1  # only the segment still open
    ledger.close()
    assert list(tmp_path.iterdir()) == [] and len(inner.written) == 20


def test_records_not_written_at_close_stay_journaled(tmp_path: Path):
    inner = FlakyLedger(failures=100)
    ledger = BufferedLedger(inner, UsageJournal(tmp_path))
    ledger.record(record(1))
    ledger.close(timeout=10)
    assert inner.written == {}
    recovered = FlakyLedger()
    assert replay(tmp_path, recovered) == 1 and list(recovered.written) == ["b1"]
