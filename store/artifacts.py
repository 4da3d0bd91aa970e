"""Where uploaded graphs and compiled programs live: a content-addressed blob store behind a small Protocol.

Keys are the sha256 of the content, so identical uploads share one blob and a key can never name different
bytes. The backend is chosen by URL (`ArtifactLocation`, from LUMINAL_ARTIFACT_URL): the local directory is the
embedded default; `artifacts_s3.py` keeps them in S3 behind the same methods.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_SHA256 = re.compile(r"[0-9a-f]{64}")
CHUNK = 1 << 20


class ArtifactStore(Protocol):
    def put_file(self, path: Path, sha256: str) -> str:
        """Move the finished file at `path` (whose content hashes to `sha256`) into the store; return its key."""
        ...

    def put_bytes(self, data: bytes) -> str:
        """Store `data` atomically; return its key."""
        ...

    def local_path(self, key: str) -> Path:
        """A readable local file holding the blob (a download into a cache for remote stores)."""
        ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def stored(self) -> Iterator[tuple[str, float]]:
        """Every key with the time (epoch seconds) it was last stored; the orphan sweep reads it."""
        ...

    def delete_if_stored_before(self, key: str, cutoff: float) -> bool:
        """Delete the blob unless it was stored at or after `cutoff`; whether it was deleted."""
        ...


def checked_key(key: str) -> str:
    """`key` when it is an artifact key (64 lowercase hex digits); keys come from our database, but a malformed
    one must never escape a store's root or name another object."""
    if not _SHA256.fullmatch(key):
        raise ValueError(f"not an artifact key: {key!r:.80}")
    return key


def is_artifact_key(name: str) -> bool:
    return _SHA256.fullmatch(name) is not None


def blob_path(root: Path, key: str) -> Path:
    """Where a directory of blobs keeps `key`: root/ab/abcdef... (256 subfolders keep each folder small)."""
    return root / key[:2] / checked_key(key)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class LocalArtifactStore:
    """Blobs at root/ab/abcdef... ; a blob appears by an atomic rename, so a reader never sees a partial one."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return blob_path(self.root, key)

    def put_file(self, path: Path, sha256: str) -> str:
        target = self._path(sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        if _still_stored(target):
            Path(path).unlink(missing_ok=True)  # same content already stored
            return sha256
        os.replace(path, target)  # atomic on one filesystem; callers spool beside the store
        return sha256

    def put_bytes(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        target = self._path(key)
        if _still_stored(target):
            return key
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{key}.{os.getpid()}.{id(data)}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return key

    def local_path(self, key: str) -> Path:
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(f"artifact {key} is missing from {self.root}")
        return path

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def delete_if_stored_before(self, key: str, cutoff: float) -> bool:
        path = self._path(key)
        try:
            if path.stat().st_mtime >= cutoff:
                return False
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    def stored(self) -> Iterator[tuple[str, float]]:
        for folder in self.root.iterdir():
            if not folder.is_dir():
                continue
            for path in folder.iterdir():
                if _SHA256.fullmatch(path.name):  # skips a put_bytes temporary (".<key>.<pid>...tmp")
                    try:
                        yield path.name, path.stat().st_mtime
                    except FileNotFoundError:  # deleted meanwhile
                        continue


def _still_stored(path: Path) -> bool:
    """Whether the blob exists, marking it stored now: storing it again may be the first step of a new
    reference, and the orphan sweep spares blobs younger than its grace period."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


@dataclass(frozen=True)
class ArtifactLocation:
    """Where the artifacts are, as plain values a child process can be handed (Settings.artifact_location)."""

    url: str  # empty = default_dir; a path or file:///path = that directory; s3://bucket/prefix = S3
    default_dir: Path
    cache_dir: Path  # this machine's read-through cache of a remote store
    part_size: int  # multipart upload and ranged download part size of a remote store
    cache_bytes: int = 0  # the cache's size limit, least recently used blobs evicted past it; 0: no limit

    def open(self) -> ArtifactStore:
        kind, where, prefix = parse_artifact_url(self.url)
        if kind == "s3":
            from luminal.store.artifacts_s3 import S3ArtifactStore  # boto3 is imported only where S3 is used

            return S3ArtifactStore(where, prefix, self.cache_dir, self.part_size, cache_bytes=self.cache_bytes)
        return LocalArtifactStore(Path(where) if where else self.default_dir)


_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")  # S3's bucket naming rules
_PREFIX = re.compile(r"[A-Za-z0-9!_.*'()\-]+(/[A-Za-z0-9!_.*'()\-]+)*")  # S3's safe key characters


def parse_artifact_url(url: str) -> tuple[str, str, str]:
    """("local", directory or "" for the default, "") or ("s3", bucket, prefix); ValueError naming the defect."""
    if not url:
        return "local", "", ""
    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://") :].partition("/")
        prefix = prefix.strip("/")
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise ValueError(f"artifact URL {url!r}: {bucket!r} is not a valid S3 bucket name")
        if prefix and (not _PREFIX.fullmatch(prefix) or any(part in {".", ".."} for part in prefix.split("/"))):
            raise ValueError(f"artifact URL {url!r}: the prefix may hold only letters, digits, / and !_.*'()-")
        return "s3", bucket, prefix
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" in url or not url.startswith("/"):
        raise ValueError(f"artifact URL {url!r}: expected s3://bucket/prefix, file:///absolute/path or /absolute/path")
    return "local", url, ""
