"""bench/step_kernels.py on a one-layer model: every kernel call of the paged step is timed, and the sum of the
calls' minimums is no more than the fastest whole step (each call of that step took at least its minimum)."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "step_kernels.py"


def test_every_call_is_timed_and_the_minimums_fit_the_fastest_step():
    cmd = [sys.executable, str(SCRIPT), "--layers", "1", "--hidden", "96", "--repeats", "3"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    wall = re.search(r"wall median ([\d.]+) ms, min ([\d.]+) ms", done.stdout)
    total = re.search(r"sum of each call's minimum: ([\d.]+) ms over (\d+) calls", done.stdout)
    assert wall and total, done.stdout
    assert 0 < float(total.group(1)) <= float(wall.group(2))
    rows = re.findall(r"^  (lm_f\d+) +x *(\d+) +([\d.]+) ms(?: +[\d.]+ GB/s of weights)?$", done.stdout, re.M)
    assert rows and len({name for name, *_ in rows}) == len(rows)
    assert sum(int(n) for _, n, _ in rows) <= int(total.group(2))  # the 15 costliest functions are listed
