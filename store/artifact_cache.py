"""A worker's local read-through cache of a remote artifact store, keyed by sha256.

Blobs live at root/ab/abcdef... . A cached file is served only after its content hashes to its key, so a file
damaged on disk (or tampered with) is dropped and fetched again, never handed to the loader. A blob enters the
cache by an atomic rename of a finished temporary, so a reader never sees a partial one, and a cache on disk
survives a restart: a worker that starts again reads what it fetched before instead of downloading it again.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from luminal.store.artifacts import blob_path, sha256_file

log = logging.getLogger(__name__)


class ArtifactCorrupt(RuntimeError):
    """Bytes that do not hash to the key that names them (a damaged download or a tampered object)."""


class VerifiedCache:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return blob_path(self.root, key)

    def get(self, key: str) -> Path | None:
        """The cached file when present and intact; a damaged one is deleted (the caller fetches it again)."""
        path = self.path(key)
        if not path.is_file():
            return None
        if sha256_file(path) != key:
            log.warning("cached artifact %s does not match its sha256: dropped, fetching it again", key)
            path.unlink(missing_ok=True)
            return None
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
        return target

    def discard(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)
