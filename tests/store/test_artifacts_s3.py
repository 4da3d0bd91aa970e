"""The S3 artifact store against a real S3-compatible server (rclone serve s3): round trips, multipart uploads,
content addressing, the worker's read-through cache (a restart downloads nothing), and refusal of bytes that do
not hash to their key, in the cache or in the bucket."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from luminal.store.artifact_cache import ArtifactCorrupt
from luminal.store.artifacts import ArtifactLocation, LocalArtifactStore, parse_artifact_url
from luminal.store.artifacts_s3 import S3ArtifactStore
from luminal.store.settings import Settings
from tests.store.s3_server import count_requests

MiB = 2**20


def open_store(url: str, cache_dir: Path, part_size: int = 5 * MiB) -> S3ArtifactStore:
    store = ArtifactLocation(url, cache_dir / "unused", cache_dir, part_size).open()
    assert isinstance(store, S3ArtifactStore)
    return store


def prefix_of(url: str) -> str:
    return url.split("/", 3)[3]


def spooled(tmp_path: Path, data: bytes, name: str = "upload") -> tuple[Path, str]:
    path = tmp_path / name
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def test_upload_then_download_on_another_machine(s3_env, s3_server, tmp_path):
    gateway = open_store(s3_env, tmp_path / "gateway-cache")
    small = gateway.put_bytes(b"prediction output")
    path, sha = spooled(tmp_path, os.urandom(300_000))
    assert gateway.put_file(path, sha) == sha and not path.exists()  # moved: into the gateway's cache
    assert gateway.exists(sha) and gateway.exists(small)
    worker = open_store(s3_env, tmp_path / "worker-cache")  # another machine: an empty cache
    sent = count_requests(worker.client)
    assert worker.local_path(small).read_bytes() == b"prediction output"
    assert hashlib.sha256(worker.local_path(sha).read_bytes()).hexdigest() == sha
    assert sent["GetObject"] >= 2
    assert {key for key, _ in worker.stored()} == {small, sha}
    worker.delete(sha)
    assert not gateway.exists(sha) and not worker.cache.path(sha).exists()
    with pytest.raises(FileNotFoundError, match=sha):
        open_store(s3_env, tmp_path / "third-cache").local_path(sha)


def test_a_large_file_goes_up_in_parts_and_comes_down_in_ranges(s3_env, s3_server, tmp_path):
    gateway = open_store(s3_env, tmp_path / "gateway-cache", part_size=5 * MiB)
    sent = count_requests(gateway.client)
    data = os.urandom(12 * MiB)
    path, sha = spooled(tmp_path, data)
    gateway.put_file(path, sha)
    assert sent["CreateMultipartUpload"] == 1 and sent["UploadPart"] == 3 and sent["CompleteMultipartUpload"] == 1
    assert sent["PutObject"] == 0
    (on_disk,) = s3_server.object_files(prefix_of(s3_env))  # what the server stored: the whole file, once
    assert on_disk.name == sha and on_disk.read_bytes() == data
    worker = open_store(s3_env, tmp_path / "worker-cache", part_size=5 * MiB)
    received = count_requests(worker.client)
    assert worker.local_path(sha).read_bytes() == data
    assert received["GetObject"] == 3  # ranged reads of one part each


def test_the_same_bytes_are_one_object(s3_env, s3_server, tmp_path):
    store = open_store(s3_env, tmp_path / "cache")
    data = b"the same graph, uploaded by two tenants" * 1000
    first, sha = spooled(tmp_path, data, "a")
    second, _ = spooled(tmp_path, data, "b")
    sent = count_requests(store.client)
    assert store.put_file(first, sha) == store.put_file(second, sha) == store.put_bytes(data) == sha
    assert sent["PutObject"] == 1  # stored again = marked stored (a copy onto itself), not uploaded again
    assert [p.name for p in s3_server.object_files(prefix_of(s3_env))] == [sha]
    assert [key for key, _ in store.stored()] == [sha]


def test_a_restarted_worker_reads_its_cache_without_any_request(s3_env, tmp_path):
    gateway = open_store(s3_env, tmp_path / "gateway-cache")
    path, sha = spooled(tmp_path, os.urandom(6 * MiB))
    gateway.put_file(path, sha)
    cache = tmp_path / "worker-cache"
    first = open_store(s3_env, cache)
    downloads = count_requests(first.client)
    first.local_path(sha)
    assert downloads["GetObject"] >= 1
    restarted = open_store(s3_env, cache)  # a new process: a new client, the same disk
    sent = count_requests(restarted.client)
    assert hashlib.sha256(restarted.local_path(sha).read_bytes()).hexdigest() == sha
    assert sum(sent.values()) == 0


def test_a_tampered_cache_entry_is_fetched_again_not_served(s3_env, tmp_path):
    gateway = open_store(s3_env, tmp_path / "gateway-cache")
    data = os.urandom(100_000)
    path, sha = spooled(tmp_path, data)
    gateway.put_file(path, sha)
    cache = tmp_path / "worker-cache"
    open_store(s3_env, cache).local_path(sha)
    cached = open_store(s3_env, cache).cache.path(sha)
    cached.write_bytes(b"evil" + data[4:])  # same size, different bytes
    restarted = open_store(s3_env, cache)
    sent = count_requests(restarted.client)
    assert restarted.local_path(sha).read_bytes() == data
    assert sent["GetObject"] == 1


def test_an_object_whose_bytes_are_not_its_key_is_refused(s3_env, s3_server, tmp_path):
    gateway = open_store(s3_env, tmp_path / "gateway-cache")
    path, sha = spooled(tmp_path, b"a real program" * 100)
    gateway.put_file(path, sha)
    (on_disk,) = s3_server.object_files(prefix_of(s3_env))
    on_disk.write_bytes(b"a program someone swapped in")  # someone with write access to the bucket
    worker = open_store(s3_env, tmp_path / "worker-cache")
    with pytest.raises(ArtifactCorrupt, match=sha):
        worker.local_path(sha)
    assert not any(p.is_file() for p in (tmp_path / "worker-cache").rglob("*"))  # nothing cached, no temporary


def test_a_file_is_never_stored_under_a_key_it_does_not_hash_to(s3_env, s3_server, tmp_path):
    store = open_store(s3_env, tmp_path / "cache")
    path, _ = spooled(tmp_path, b"content")
    with pytest.raises(ArtifactCorrupt):
        store.put_file(path, "0" * 64)
    assert s3_server.object_files(prefix_of(s3_env)) == []
    with pytest.raises(ValueError, match="not an artifact key"):
        store.local_path("../../etc/passwd")


def test_the_orphan_sweep_reads_ages_from_the_bucket(s3_env, tmp_path):
    store = open_store(s3_env, tmp_path / "cache")
    key = store.put_bytes(b"orphan")
    ((listed, stored_at),) = list(store.stored())
    assert listed == key
    assert not store.delete_if_stored_before(key, stored_at - 60)  # younger than the cutoff: kept
    assert store.delete_if_stored_before(key, stored_at + 60)
    assert not store.exists(key) and list(store.stored()) == []


def test_storing_again_renews_the_age_the_orphan_sweep_reads(s3_env, tmp_path):
    # A blob uploaded again may be the first step of a new reference: the sweep's last check must see it young.
    store = open_store(s3_env, tmp_path / "cache")
    key = store.put_bytes(b"shared blob")
    ((_, first),) = list(store.stored())
    time.sleep(2.1)  # S3 times may have whole seconds; not a race: only "later than before" matters
    assert store.put_bytes(b"shared blob") == key
    assert not store.delete_if_stored_before(key, first + 0.5)  # stored again after the cutoff: spared
    assert store.exists(key)


def test_wrong_keys_are_refused_by_the_server(s3_env, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-0123456789abcdefghijkl")
    store = open_store(s3_env, tmp_path / "cache")
    with pytest.raises(Exception, match="403|Forbidden|SignatureDoesNotMatch|AccessDenied"):
        store.put_bytes(b"anything")


@pytest.mark.parametrize(
    "url, parsed",
    [
        ("", ("local", "", "")),
        ("/srv/artifacts", ("local", "/srv/artifacts", "")),
        ("file:///srv/artifacts", ("local", "/srv/artifacts", "")),
        ("s3://my-bucket", ("s3", "my-bucket", "")),
        ("s3://my-bucket/prod/models/", ("s3", "my-bucket", "prod/models")),
    ],
)
def test_artifact_urls(url, parsed):
    assert parse_artifact_url(url) == parsed


@pytest.mark.parametrize(
    "url, problem",
    [
        ("s3://", "bucket name"),
        ("s3://UPPER/x", "bucket name"),
        ("s3://bucket/../other", "prefix"),
        ("s3://bucket/a b", "prefix"),
        ("gs://bucket/x", "expected s3://"),
        ("relative/dir", "expected s3://"),
    ],
)
def test_bad_artifact_urls_are_refused_naming_the_problem(monkeypatch, url, problem):
    monkeypatch.setenv("LUMINAL_ARTIFACT_URL", url)
    with pytest.raises(ValidationError, match=problem):
        Settings()


def test_a_part_size_s3_would_refuse_is_refused(monkeypatch):
    monkeypatch.setenv("LUMINAL_ARTIFACT_PART_SIZE", str(4 * MiB))  # S3's smallest part (but the last) is 5 MiB
    with pytest.raises(ValidationError, match="artifact_part_size"):
        Settings()


def test_settings_choose_the_backend_by_url(tmp_path, s3_env):
    local = Settings(data_dir=tmp_path).artifact_location
    assert isinstance(local.open(), LocalArtifactStore) and local.default_dir == tmp_path / "artifacts"
    remote = Settings(data_dir=tmp_path, artifact_url=s3_env).artifact_location
    assert remote.cache_dir == tmp_path / "artifact-cache" and isinstance(remote.open(), S3ArtifactStore)
