"""bench/gemm_roofline.py and bench/encoder_kernels.py at small sizes: the roofline prints a positive FMA peak and a
GFLOP/s figure per runner for each shape (luminal's output checked against numpy before it is timed); the encoder's
per-kernel table accounts for every call, and its per-call minimums fit the fastest whole run."""

import os
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_roofline_prints_the_peak_and_every_runner_per_shape():
    out = _run("gemm_roofline.py", "--shapes", "13x40x70,1x64x33", "--rounds", "1", "--variant", "kc16=-DLM_KC=16")
    peak = re.search(r"FMA peak, one thread: ([\d.]+) GFLOP/s", out)
    assert peak and float(peak.group(1)) > 0, out
    rows = re.findall(r"^(\d+x\d+x\d+) +([\d.]+) +([\d.]+) +([\d.]+) ", out, re.M)
    assert [r[0] for r in rows] == ["13x40x70", "1x64x33"], out
    assert all(float(v) > 0 for r in rows for v in r[1:]), out


def test_encoder_kernels_account_for_every_call():
    out = _run("encoder_kernels.py", "--layers", "1", "--seq", "16", "--repeats", "3")
    wall = re.search(r"wall median ([\d.]+) ms, min ([\d.]+) ms", out)
    total = re.search(r"sum of per-call minima ([\d.]+) ms over (\d+) calls", out)
    assert wall and total, out
    assert 0 < float(total.group(1)) <= float(wall.group(2))
    rows = re.findall(r"^  (lm_f\d+) +x *(\d+) +([\d.]+) ms .*?(gemm \S+|attention|loop)", out, re.M)
    assert sum(int(n) for _, n, _, _ in rows) == int(total.group(2)), out
    assert any(kind.startswith("gemm") for *_, kind in rows) and any(kind == "attention" for *_, kind in rows), out
