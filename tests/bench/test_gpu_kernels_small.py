"""bench/gpu_kernels.py --small: the decode step's launches by shape and ptxas's report per shape, no GPU needed."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_kernels.py"


@pytest.mark.needs("nvcc")
def test_decode_report_lists_launches_and_registers():
    cmd = [sys.executable, str(SCRIPT), "--small", "--only", "decode"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    launches = re.search(r"decode: (\d+) kernels, (\d+) launches per run: \{(.*)\}", done.stdout)
    assert launches and int(launches.group(1)) > 0 and int(launches.group(2)) > 0  # fewer where merged
    counts = dict(re.findall(r"'(\w+)': (\d+)", launches.group(3)))
    assert "attention" in counts and "gemv" in counts  # attention and the decode's split-K matrix-vector products
    # shape, kernels, registers, spilled bytes, shared bytes, 64-bit divisions in one kernel's PTX (at most)
    rows = re.findall(r"^  (\w+) +(\d+) +(\d+) +(\d+) +(\d+) +(\d+)$", done.stdout, re.M)
    assert {shape for shape, *_ in rows} == set(counts)
    assert sum(int(n) for _, n, *_ in rows) == sum(int(n) for n in counts.values())
    assert all(int(regs) > 0 for _, _, regs, *_ in rows)
