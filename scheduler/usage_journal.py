"""An append-only journal of usage records under data_dir: what keeps the embedded platform's billing exact when
its process is killed.

Thread workers hand their records to a `BufferedLedger`, which writes them to the database off the serving path;
before it returns (and so before a batch's answers are released) it appends the record here with one unbuffered
write. Once write() returns, the line is in the kernel's page cache, which a SIGKILL of the process cannot undo
(a power loss can, as it can SQLite's own last commits under synchronous=NORMAL). The next start replays what
is left into the ledger. Replaying is idempotent (batch and request ids are the ledger's keys), so a record that
reached both the journal and the database is billed once.

The journal is a series of segment files. The process writing a segment holds an exclusive lock on it until all
of its records are in the database, then deletes it; a replay skips segments locked by a live process.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import time
from pathlib import Path

from luminal.scheduler.billing import LedgerError, UsageLedger, UsageRecord

log = logging.getLogger(__name__)
SEGMENT_BYTES = 4 * 2**20  # a segment this large is closed and a new one begun, so written ones can be deleted
REPLAY_CHUNK = 500  # records per transaction when replaying
_PATTERN = "usage-*.jsonl"
_FIELDS = tuple(field.name for field in dataclasses.fields(UsageRecord))


def encode(record: UsageRecord) -> bytes:
    # The fields as they are (json writes tuples as lists): dataclasses.asdict deep-copies, ten times slower.
    fields = {name: getattr(record, name) for name in _FIELDS}
    return (json.dumps(fields, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> UsageRecord:
    fields = json.loads(line)
    fields["request_ids"], fields["request_rows"] = tuple(fields["request_ids"]), tuple(fields["request_rows"])
    return UsageRecord(**fields)


@dataclasses.dataclass
class _Segment:
    path: Path
    fd: int
    appended_before_end: int = 0  # records appended to the journal up to this segment's end, once it is closed


class UsageJournal:
    """Not thread-safe: its one user (`BufferedLedger`) calls it under its own lock."""

    def __init__(self, directory: Path, segment_bytes: int = SEGMENT_BYTES):
        self.directory, self.segment_bytes = directory, segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._name = f"usage-{time.time_ns()}-{os.getpid()}"
        self._closed: list[_Segment] = []  # full segments whose records may not all be in the database yet
        self._appended = 0
        self._count = 0
        self._size = 0
        self._current = self._open()

    def append(self, record: UsageRecord) -> None:
        """The record is in the journal when this returns; raises OSError when it could not be written."""
        line = encode(record)
        data = memoryview(line)
        while data:  # a regular file takes it in one call, unless the disk is full (which raises)
            data = data[os.write(self._current.fd, data) :]
        self._appended += 1
        self._size += len(line)
        if self._size >= self.segment_bytes:
            self._current.appended_before_end = self._appended
            self._closed.append(self._current)
            self._current, self._size = self._open(), 0

    def release(self, written: int) -> None:
        """The first `written` records appended are in the database: delete the closed segments they fill."""
        while self._closed and self._closed[0].appended_before_end <= written:
            _remove(self._closed.pop(0))

    def close(self, all_written: bool) -> None:
        """Release the files; delete them when every record is in the database, else leave them to a replay."""
        for segment in [*self._closed, self._current]:
            if all_written:
                _remove(segment)
            else:
                os.close(segment.fd)
        self._closed = []

    def _open(self) -> _Segment:
        self._count += 1
        path = self.directory / f"{self._name}-{self._count:06d}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else can hold it
        return _Segment(path, fd)


def _remove(segment: _Segment) -> None:
    segment.path.unlink(missing_ok=True)  # unlinked while still locked: a replay cannot take it in between
    os.close(segment.fd)


def replay(directory: Path, ledger: UsageLedger) -> int:
    """Write what earlier processes left in the journal into `ledger`, then delete their segments; the number of
    records that billed something now. A record the ledger refuses is logged and dropped (it never can be billed);
    any other failure (the database is down) raises and leaves the segment for the next start."""
    billed = 0
    for path in sorted(directory.glob(_PATTERN)) if directory.is_dir() else []:
        with open(path, "rb") as file:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a live process is still writing it
                continue
            records = _read(path, file.read())
            for start in range(0, len(records), REPLAY_CHUNK):
                billed += write_records(ledger, records[start : start + REPLAY_CHUNK])
            path.unlink()
        log.info("usage journal %s replayed: %d record(s)", path.name, len(records))
    return billed


def _read(path: Path, data: bytes) -> list[UsageRecord]:
    lines = data.split(b"\n")
    if lines[-1]:  # cut short by the kill: its write never returned, so its batch was never answered
        log.warning("usage journal %s: dropping a partly written last line (%d bytes)", path.name, len(lines[-1]))
    records = []
    for number, line in enumerate(lines[:-1], 1):
        try:
            records.append(decode(line))
        except (ValueError, TypeError, KeyError) as e:
            log.error("usage journal %s line %d is not a usage record (%s): %.200r", path.name, number, e, line)
    return records


def write_records(ledger: UsageLedger, records: list[UsageRecord]) -> int:
    """Write `records` (in one transaction where the ledger can); the number that billed something. A record the
    ledger refuses is logged and dropped: it never can be billed. Any other failure raises, nothing dropped."""
    record_many = getattr(ledger, "record_many", None)
    if record_many is not None:
        try:
            return sum(record_many(records))
        except LedgerError:  # one record cannot be billed: the others one by one
            pass
    billed = 0
    for record in records:
        try:
            billed += ledger.record(record)
        except LedgerError:
            log.exception("usage record of batch %s cannot be billed, dropped: %r", record.batch_id, record)
    return billed
