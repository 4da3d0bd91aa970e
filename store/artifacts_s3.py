"""Artifacts in an S3 bucket (`LUMINAL_ARTIFACT_URL=s3://bucket/prefix`), through boto3, with a verified local
read-through cache on each machine.

Objects are named prefix/ab/<sha256> after their content, so the same bytes are one object however often they
are uploaded. boto3 reads the standard AWS settings itself (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`/`AWS_DEFAULT_REGION`, profiles, instance roles). A file larger than the part
size goes up as a multipart upload; S3 shows an object only once its upload completes, so no reader sees a part
of one. Reads go through the cache: an intact cached copy costs no request at all, a download is checked against
its key before it is served or cached.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from luminal.store.artifact_cache import ArtifactCorrupt, VerifiedCache
from luminal.store.artifacts import checked_key, is_artifact_key, sha256_file

MiB = 2**20


class S3ArtifactStore:
    def __init__(
        self,
        bucket: str,
        prefix: str,
        cache_dir: Path,
        part_size: int = 64 * MiB,
        client: Any = None,
        cache_bytes: int = 0,  # the read-through cache's size limit (least recently used blobs go); 0: none
    ):
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.cache = VerifiedCache(cache_dir, cache_bytes)
        self.client = client if client is not None else _client()
        from boto3.s3.transfer import TransferConfig

        # Parts of `part_size` both ways: multipart uploads above it, parallel ranged GETs for downloads.
        self.transfer = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size, max_concurrency=4)

    def _name(self, key: str) -> str:
        key = checked_key(key)
        return f"{self.prefix}/{key[:2]}/{key}" if self.prefix else f"{key[:2]}/{key}"

    def put_file(self, path: Path, sha256: str) -> str:
        name = self._name(sha256)
        if sha256_file(path) != sha256:  # an object must never be stored under a key its bytes do not have
            raise ArtifactCorrupt(f"{path} does not hash to {sha256}; not stored")
        if not self._mark_stored(name):
            self.client.upload_file(str(path), self.bucket, name, Config=self.transfer)
        # The uploader (a gateway, a compile job) is often the next reader: keep the file as the cached copy.
        self.cache.admit(sha256, Path(path), checked=True)
        return sha256

    def put_bytes(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        name = self._name(key)
        if not self._mark_stored(name):
            self.client.put_object(Bucket=self.bucket, Key=name, Body=data)
        return key

    def local_path(self, key: str) -> Path:
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        name = self._name(key)
        download = self.cache.temporary(key)
        try:
            self.client.download_file(self.bucket, name, str(download), Config=self.transfer)
        except Exception as e:
            download.unlink(missing_ok=True)
            if _missing(e):
                raise FileNotFoundError(f"artifact {key} is missing from s3://{self.bucket}/{self.prefix}") from None
            raise
        return self.cache.admit(key, download)  # ArtifactCorrupt when the object's bytes are not its key's

    def exists(self, key: str) -> bool:
        return self._head(self._name(key)) is not None

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._name(key))
        self.cache.discard(key)

    def stored(self) -> Iterator[tuple[str, float]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else ""
        )
        for page in pages:
            for entry in page.get("Contents", []):
                key = entry["Key"].rsplit("/", 1)[-1]
                if is_artifact_key(key):
                    yield key, entry["LastModified"].timestamp()

    def delete_if_stored_before(self, key: str, cutoff: float) -> bool:
        # Not atomic (S3 has no conditional delete on age): the sweep's grace period, far longer than the
        # time between this check and the delete, is what keeps a blob stored again meanwhile.
        head = self._head(self._name(key))
        if head is None or head["LastModified"].timestamp() >= cutoff:
            return False
        self.delete(key)
        return True

    def _head(self, name: str) -> dict | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=name)
        except Exception as e:
            if _missing(e):
                return None
            raise

    def _mark_stored(self, name: str) -> bool:
        """Whether the object exists, marking it stored now (copied onto itself, which renews its modification
        time): storing it again may be the first step of a new reference, and the orphan sweep spares young
        blobs."""
        if self._head(name) is None:
            return False
        source = {"Bucket": self.bucket, "Key": name}
        # New metadata makes it a real change: a copy with nothing changed may be a no-op that keeps the old time.
        stamp = {"luminal-stored-at": f"{time.time():.3f}"}
        self.client.copy_object(
            Bucket=self.bucket, Key=name, CopySource=source, MetadataDirective="REPLACE", Metadata=stamp
        )
        return True


def _missing(error: Exception) -> bool:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code")) in {"404", "NoSuchKey", "NotFound"}


def _client() -> Any:
    import boto3
    from botocore.config import Config

    # S3-compatible servers named by AWS_ENDPOINT_URL (MinIO, SeaweedFS, rclone) address buckets by path;
    # AWS itself takes either.
    style = "path" if os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") else "auto"
    # A session of its own: boto3's shared default session is not safe to create clients from in several threads.
    session = boto3.session.Session()
    return session.client("s3", config=Config(s3={"addressing_style": style}, retries={"mode": "standard"}))
