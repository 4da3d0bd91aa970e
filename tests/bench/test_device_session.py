"""bench/device_session.sh, the lent GPU machine's programme, runs here too: the machine report first, then the
device tests, each stage's exit status in the summary; where there is no GPU the report says so row by row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_session_reports_the_machine_then_runs_the_device_tests(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "SKIP_INSTALL": "1", "PY": sys.executable}
    done = subprocess.run(["bash", "bench/device_session.sh", "env", "tests"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == ["env", "tests"], done.stdout + done.stderr
    assert all(": exit 0 in" in line for line in summary), summary
    report = (tmp_path / "env.log").read_text()
    for row in ("GPU", "CuPy", "NVRTC", "libcublas", "numpy", "ml_dtypes", "torch", "luminal CUDA runtime"):
        assert f"\n{row}" in f"\n{report}", (row, report)
    assert done.stdout.rstrip().endswith(summary[-1])  # the summary last: the device tool returns the tail
