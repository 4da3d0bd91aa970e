"""`luminal serve --grpc-port` as a real process with the tiny model deployed as "tiny", for the gRPC tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.gateway.conftest import BOOTSTRAP_KEY, RunningServer, deploy_and_wait, upload
from tests.gateway.serve_process import wait_until_ready
from tests.gateway.tenancy import ADMIN_TOKEN
from tests.gateway.threaded_server import free_port


@contextmanager
def serving_tiny(data_dir: Path, model_bytes: bytes, **env: str) -> Iterator[tuple[RunningServer, str]]:
    """(the REST server, the gRPC address); `env` adds LUMINAL_* settings to the tests' own."""
    port, grpc_port = free_port(), free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith("LUMINAL_")}
    full |= {"LUMINAL_BOOTSTRAP_KEY": BOOTSTRAP_KEY, "LUMINAL_ADMIN_TOKEN": ADMIN_TOKEN}
    full["LUMINAL_COMPILE_RUNNER"] = "thread"  # as the other gateway tests compile
    if "LUMINAL_CACHE_DIR" in os.environ:
        full["LUMINAL_CACHE_DIR"] = os.environ["LUMINAL_CACHE_DIR"]
    cmd = [sys.executable, "-m", "luminal.cli", "serve", "--port", str(port), "--grpc-port", str(grpc_port)]
    proc = subprocess.Popen(
        [*cmd, "--data-dir", str(data_dir)], env=full | env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        rest = RunningServer(f"http://127.0.0.1:{port}", f"127.0.0.1:{port}", None)
        wait_until_ready(rest.url, proc)
        c = rest.client()
        assert upload(c, "tiny", model_bytes).status_code == 201
        assert deploy_and_wait(c, "tiny")["status"] == "ready"
        yield rest, f"127.0.0.1:{grpc_port}"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
