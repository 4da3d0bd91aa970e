"""The artifact cache's size limit (LUMINAL_ARTIFACT_CACHE_BYTES): past it the least recently used blobs are
deleted, by the use recorded on disk (so the order survives a restart), never the blob just admitted nor one
used within the grace period; on S3 an evicted blob is fetched again on its next use."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from luminal.store.artifact_cache import EVICTION_GRACE_S, VerifiedCache
from luminal.store.settings import Settings
from tests.store.s3_server import count_requests


def blob(tmp_path: Path, fill: bytes, size: int = 1000) -> tuple[str, Path]:
    data = fill * size
    path = tmp_path / f"spool-{fill.hex()}"
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest(), path


def used(cache: VerifiedCache, key: str, seconds_ago: float) -> None:
    """Record the blob's last use `seconds_ago` (what a hit that long ago leaves on disk)."""
    at = time.time() - seconds_ago
    os.utime(cache.path(key), (at, at))


def cached(cache: VerifiedCache, *keys: str) -> list[bool]:
    return [cache.path(k).is_file() for k in keys]


def test_the_least_recently_used_blob_goes_and_the_order_survives_a_restart(tmp_path):
    cache = VerifiedCache(tmp_path / "cache", max_bytes=2500)
    (a, a_file), (b, b_file), (c, c_file) = (blob(tmp_path, bytes([n])) for n in (1, 2, 3))
    cache.admit(a, a_file)
    cache.admit(b, b_file)
    assert cached(cache, a, b) == [True, True]  # 2000 bytes fit
    used(cache, a, 300)
    used(cache, b, 200)
    assert cache.get(a) is not None  # a hit: a is now the most recently used
    used(cache, a, 100)
    restarted = VerifiedCache(tmp_path / "cache", max_bytes=2500)
    restarted.admit(c, c_file)  # 3000 bytes: one must go, the least recently used
    assert cached(restarted, a, b, c) == [True, False, True]


def test_blobs_in_use_are_spared_until_the_grace_period_has_passed(tmp_path):
    cache = VerifiedCache(tmp_path / "cache", max_bytes=1500)
    keys = []
    for n in (1, 2, 3):
        key, file = blob(tmp_path, bytes([n]))
        cache.admit(key, file)
        keys.append(key)
    assert cached(cache, *keys) == [True, True, True]  # over the limit, but each was used just now
    used(cache, keys[0], EVICTION_GRACE_S + 20)
    used(cache, keys[1], EVICTION_GRACE_S + 10)
    assert cache.evict() == [cache.path(keys[0]), cache.path(keys[1])]  # oldest first, until it fits
    assert cached(cache, *keys) == [False, False, True]


def test_a_blob_larger_than_the_limit_is_still_served(tmp_path):
    cache = VerifiedCache(tmp_path / "cache", max_bytes=100)
    key, file = blob(tmp_path, b"\x07")
    assert cache.admit(key, file).is_file() and cache.get(key) is not None


def test_no_limit_keeps_everything_and_a_negative_limit_is_refused(tmp_path):
    cache = VerifiedCache(tmp_path / "cache")
    for n in range(5):
        key, file = blob(tmp_path, bytes([n]))
        cache.admit(key, file)
        used(cache, key, 10_000)
    assert cache.evict() == [] and len(list((tmp_path / "cache").glob("*/*"))) == 5
    with pytest.raises(ValueError, match="size limit"):
        VerifiedCache(tmp_path / "other", max_bytes=-1)


def test_an_evicted_blob_is_fetched_from_s3_again(s3_env, tmp_path):
    gateway = Settings(data_dir=tmp_path / "gateway", artifact_url=s3_env).artifact_location.open()
    (a, a_file), (b, b_file) = blob(tmp_path, b"\x01"), blob(tmp_path, b"\x02")
    gateway.put_file(a_file, a)
    gateway.put_file(b_file, b)
    worker = Settings(data_dir=tmp_path / "worker", artifact_url=s3_env, artifact_cache_bytes=1500)
    store = worker.artifact_location.open()
    assert store.cache.max_bytes == 1500
    sent = count_requests(store.client)
    store.local_path(a)
    used(store.cache, a, EVICTION_GRACE_S + 10)
    store.local_path(b)  # a is evicted to make room
    assert cached(store.cache, a, b) == [False, True]
    assert store.local_path(a).read_bytes() == b"\x01" * 1000  # fetched again
    assert sent["GetObject"] == 3
