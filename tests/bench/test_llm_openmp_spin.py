"""bench/llm.py measures the engine as it is served: the libgomp its programs run on (torch's, loaded when the
bench imports torch, and shared with the programs) reads the serving spin count that `luminal serve` and the
worker processes set (scheduler/openmp_spin.py), not libgomp's default. libgomp prints what it read when it
loads, under OMP_DISPLAY_ENV=VERBOSE."""

import os
import subprocess
import sys
from pathlib import Path

from luminal.scheduler.openmp_spin import SERVING_SPINCOUNT

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_bench_bounds_spinning_before_libgomp_loads():
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import llm, torch"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"GOMP_SPINCOUNT = '{SERVING_SPINCOUNT}'" in done.stderr, done.stderr[-3000:]
