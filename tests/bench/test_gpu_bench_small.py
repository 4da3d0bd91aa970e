"""bench/gpu.py --small runs here: the torch rows are timed, the luminal rows say why the CUDA runtime cannot run
(or are timed, on a GPU machine), and the luminal reference interpreter agrees with the torch anchors. With
--precompile / --programs the programs travel as files and are read back instead of compiled.
torch.compile is skipped (--no-torch-compile): Inductor's C++ build alone takes minutes on two cores."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from luminal.runtime.cuda import missing

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu.py"
LUMINAL_ROWS = (
    "luminal cuda paged step (one CUDA graph)",
    "luminal cuda paged step, batched",
    "luminal cuda (one CUDA graph)",
    "luminal cuda (kernel by kernel)",
    "luminal engine, device pools + sampling",  # (e): the serving row
)


def bench(*args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH), "--small", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def check_table(out: str) -> None:
    sections = ["(a) decode", "(b) ", "(c) prefill, batch 1", "(c) MiniLM-shaped encoder", "(c) prefill GEMMs"]
    sections.append("(d) decode, 3 sequences of 16 cached positions each")
    sections.append("(e) LLM serving: 3 concurrent sequences")
    for section in sections:
        assert section in out, section
    assert re.search(r"torch eager +\d+\.\d+ +1\.00x", out)
    assert "torch.compile reduce-overhead            skipped (--no-torch-compile)" in out
    reason = missing()
    for row in LUMINAL_ROWS:
        if reason is None:  # a GPU machine: the runtime runs and is timed
            assert re.search(re.escape(row) + r" +\d+\.\d+ ", out), row
        else:
            assert f"{row:<40} unavailable: cannot run the h100 program here: {reason}" in out
    # The interpreter runs luminal's own builders on the same weights: the torch anchors compute the same thing.
    checks = re.findall(r"luminal reference interpreter +- +- +(\S+) \((\S+)\)", out)
    assert len(checks) == 9 and all(float(diff) < 0.05 for diff, _ in checks), checks
    assert "DISAGREE" not in out
    # (c)'s GEMMs: the kind the compile chose, and our wmma kernel and cuBLAS step each forced
    assert len(re.findall(r"the compile chose: (?:cublas|mma|gemm|gemv) \(generated: ", out)) == 4
    for row in ("luminal generated GEMM (one CUDA graph)", "luminal cuBLAS step"):
        assert len(re.findall(re.escape(row) + (r" +\d+\.\d+ " if reason is None else " +unavailable"), out)) == 4


def test_small_bench_prints_every_runner():
    out = bench("--no-torch-compile")
    check_table(out)
    assert "decode: compiled in" in out and "copy bandwidth:" in out


@pytest.mark.parametrize("target", ["h100"])
def test_precompiled_programs_are_read_back(tmp_path, target):
    listing = bench("--precompile", str(tmp_path), "--target", target)
    assert re.search(rf"decode: compiled for {target} in [\d.]+ s, \d+ kernels", listing)
    names = sorted(p.name for p in tmp_path.iterdir())[:3]
    assert names == ["decode-paged-batch.lprog.gz", "decode-paged.lprog.gz", "decode.lprog.gz"]
    out = bench("--programs", str(tmp_path), "--no-torch-compile", "--target", target)
    check_table(out)
    assert f"decode: read from {tmp_path} in" in out


def test_a_missing_program_names_the_fix(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH), "--small", "--programs", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode != 0 and f"run bench/gpu.py --precompile {tmp_path}" in done.stderr


def test_a_target_that_is_not_cuda_is_refused():
    done = subprocess.run([sys.executable, str(BENCH), "--small", "--target", "cpu"], capture_output=True, text=True)
    assert done.returncode == 2 and "--target 'cpu' is not a CUDA target; one of a100, h100" in done.stderr
