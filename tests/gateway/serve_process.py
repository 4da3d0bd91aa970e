"""Waiting for a `luminal serve` process the test started to answer, or failing with what it printed."""

from __future__ import annotations

import subprocess
import time

import httpx

from tests.tls_context import tls_context


def wait_until_ready(url: str, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Until `url`'s readiness probe answers 200; an exit or the timeout fails the test with the process's output."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1, verify=tls_context()).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.terminate()
    output = proc.communicate(timeout=5)[0]
    raise AssertionError(f"luminal serve did not start: {output}")
