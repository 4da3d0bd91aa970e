"""A worker's local read-through cache of a remote artifact store, keyed by sha256.

Blobs live at root/ab/abcdef... . A cached file is served only after its content hashes to its key, so a file
damaged on disk (or tampered with) is dropped and fetched again, never handed to the loader. A blob enters the
cache by an atomic rename of a finished temporary, so a reader never sees a partial one, and a cache on disk
survives a restart: a worker that starts again reads what it fetched before instead of downloading it again.

With `max_bytes`, the least recently used blobs are deleted whenever an admission takes the cache past it. Use is
recorded on disk as each file's modification time (touched on every hit), so the order survives a restart and is
shared by the workers of one machine. The blob just admitted is never evicted (its reader is about to open it),
nor is one used in the last `EVICTION_GRACE_S`: another worker may hold its path and not have opened it yet.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

from luminal.store.artifacts import blob_path, sha256_file

log = logging.getLogger(__name__)
EVICTION_GRACE_S = 60.0  # far longer than between a worker's lookup of a blob and its open()


class ArtifactCorrupt(RuntimeError):
    """Bytes that do not hash to the key that names them (a damaged download or a tampered object)."""


class VerifiedCache:
    def __init__(self, root: Path, max_bytes: int = 0):
        if max_bytes < 0:
            raise ValueError(f"an artifact cache's size limit is 0 (none) or positive, not {max_bytes}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes  # 0: no limit

    def path(self, key: str) -> Path:
        return blob_path(self.root, key)

    def get(self, key: str) -> Path | None:
        """The cached file when present and intact; a damaged one is deleted (the caller fetches it again)."""
        path = self.path(key)
        try:
            intact = sha256_file(path) == key
        except FileNotFoundError:  # never cached, or evicted by another process of this machine meanwhile
            return None
        if not intact:
            log.warning("cached artifact %s does not match its sha256: dropped, fetching it again", key)
            path.unlink(missing_ok=True)
            return None
        self._touch(path)
        return path

    def temporary(self, key: str) -> Path:
        """A fresh temporary file beside the entry (same filesystem, so `admit` is one rename)."""
        folder = self.path(key).parent
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=folder)
        os.close(fd)
        return Path(name)

    def admit(self, key: str, file: Path, checked: bool = False) -> Path:
        """Move the finished `file` into the cache after checking it hashes to `key` (unless the caller just
        `checked` it); raise ArtifactCorrupt and delete it when it does not."""
        if not checked and sha256_file(file) != key:
            Path(file).unlink(missing_ok=True)
            raise ArtifactCorrupt(f"artifact {key}: the bytes read do not hash to their key; refused")
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(file, target)
        except OSError:  # another filesystem (a spool elsewhere): copy into a temporary here, then rename
            local = self.temporary(key)
            with open(file, "rb") as src, open(local, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            os.replace(local, target)
            Path(file).unlink(missing_ok=True)
        self._touch(target)
        self.evict(keep=target)
        return target

    def evict(self, keep: Path | None = None) -> list[Path]:
        """Delete least recently used blobs until the cache fits `max_bytes` (but `keep` and those used in the
        last EVICTION_GRACE_S); returns what was deleted."""
        if not self.max_bytes:
            return []
        entries = []
        for path in self.root.glob("*/*"):
            if path.name.startswith("."):  # a temporary being written
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:  # evicted or discarded by another process meanwhile
                continue
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        spare_after = time.time() - EVICTION_GRACE_S
        evicted = []
        for used_at, size, path in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            if path == keep or used_at > spare_after:
                continue
            path.unlink(missing_ok=True)
            total -= size
            evicted.append(path)
        if evicted:
            log.info("artifact cache: evicted %d least recently used blob(s) to fit %d bytes", len(evicted),
                     self.max_bytes)  # fmt: skip
        return evicted

    @staticmethod
    def _touch(path: Path) -> None:
        try:
            os.utime(path)  # the modification time is the last use: the LRU order, kept on disk
        except FileNotFoundError:
            pass

    def discard(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)
