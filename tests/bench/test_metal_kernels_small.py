"""bench/metal_kernels.py --small: each program's Metal dispatches by shape, its load plan and its bytes."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "metal_kernels.py"


def test_every_program_is_reported_with_dispatches_that_add_up():
    done = subprocess.run([sys.executable, str(SCRIPT), "--small"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.findall(r"^([\w-]+): (\d+) dispatches per run \{(.*)\}, (\d+) at load$", done.stdout, re.M)
    assert [name for name, *_ in found] == ["prefill", "encoder", "decode-paged"]
    for name, total, shapes, _ in found:
        counts = [int(n) for n in re.findall(r"'\w+': (\d+)", shapes)]
        assert int(total) > 0 and sum(counts) == int(total), name
    assert "attention" in found[0][2] and "scatter" in found[2][2]  # the prefill attends; the paged step scatters
    assert len(re.findall(r"MB read, [\d.]+ MB written per run, [\d.]+ MB derived", done.stdout)) == 3
