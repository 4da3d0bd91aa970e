"""The zip mechanics both of our file formats share (`.lgraph` graphs and compiled-program artifacts).

Writing is deterministic (fixed timestamps and attributes) and atomic (a temporary file renamed into place).
Reading treats the file as hostile: the end-of-archive record is checked before zipfile parses a directory,
and an entry is read in chunks, never past its declared (and capped) size. Each caller passes its own
exception type, so a format reports every defect through one error class of its own.
"""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
import zipfile
import zlib
from typing import IO, Any, Callable

CHUNK = 2**20
EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest zip timestamp: a fixed date keeps the bytes reproducible


def entry_info(name: str, compress_type: int) -> zipfile.ZipInfo:
    """A ZipInfo whose bytes do not depend on when or where the file was written."""
    info = zipfile.ZipInfo(name, date_time=EPOCH)
    info.compress_type = compress_type
    info.create_system = 3  # "unix" everywhere, or the bytes would depend on the writing platform
    info.external_attr = 0o644 << 16
    return info


def write_atomic(path: Any, write: Callable[[IO[bytes]], None], prefix: str) -> None:
    """Run `write` on a temporary file beside `path`, then rename it into place: on any error nothing is left."""
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; these files are ordinary data
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def end_record(f: IO[bytes], size: int, error: type[Exception]) -> tuple[int, int]:
    """(entry count, central directory bytes) from the end-of-archive record, found without zipfile."""
    tail_len = min(size, 22 + 0xFFFF)  # the record (22 bytes) plus the longest archive comment
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise error("not a zip archive, or a truncated one: no end-of-archive record")
    count, directory_size = struct.unpack("<4s4H2LH", tail[at : at + 22])[4:6]
    return count, directory_size


def read_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int, error: type[Exception]) -> bytearray:
    """The entry's bytes, reading at most its declared size (itself capped) plus one byte to detect lies."""
    limit = min(info.file_size, cap)
    buf = bytearray()
    try:
        with zf.open(info) as f:
            while chunk := f.read(min(CHUNK, limit + 1 - len(buf))):
                buf += chunk
                if len(buf) > limit:
                    raise error(f"entry {info.filename} inflates past its declared {limit} bytes")
    except error:
        raise
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError, struct.error) as e:
        # RuntimeError: zipfile's "encrypted, password required", should a caller's flag check be bypassed
        raise error(f"entry {info.filename} is corrupt: {e}") from None
    if len(buf) != info.file_size:
        raise error(f"entry {info.filename} holds {len(buf)} bytes but declares {info.file_size}")
    return buf
