"""A compiled CPU program's generated C with a clock around every kernel call in `lm_run`: where its time goes,
kernel by kernel (bench/step_kernels.py, bench/encoder_kernels.py)."""

from __future__ import annotations

import ctypes
import re
import time
from pathlib import Path

import numpy as np

from luminal.runtime import cpu

CALL = re.compile(r"  if \((lm_f\d+)\(B, D, (.*)\)\) return 1;  /\* (.*) \*/")


def timed_source(source: str) -> tuple[str, list[str]]:
    """`source` with lm_run's calls timed into `lm_call_seconds[i]`, and the function each call i runs."""
    run = source.index("int lm_run(")
    end = source.index("\n}", run)
    functions: list[str] = []

    def timed(m: re.Match) -> str:
        functions.append(m.group(1))
        at = len(functions) - 1
        return (
            f"  {{ struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0); int e = {m.group(1)}(B, D, "
            f"{m.group(2)}); clock_gettime(CLOCK_MONOTONIC, &t1); lm_call_seconds[{at}] = (t1.tv_sec - t0.tv_sec)"
            f" + 1e-9 * (t1.tv_nsec - t0.tv_nsec); if (e) return 1; }}"
        )

    body = CALL.sub(timed, source[run:end])
    head = f"#include <time.h>\ndouble lm_call_seconds[{max(len(functions), 1)}];\n"
    return head + source[:run] + body + source[end:], functions


def timed_executable(program):
    """(executable, the per-call seconds array it fills on every run, the function each call runs) for a
    compiled cpu `program`, built from its timed source."""
    source, functions = timed_source(program.source)

    class Timed(cpu.CpuExecutable):
        def build(self, _source: str) -> Path:
            return cpu.build_library(source)

    class TimedRuntime(cpu.CpuRuntime):
        executable = Timed

    exe = TimedRuntime().load(program)
    seconds = (ctypes.c_double * max(len(functions), 1)).in_dll(exe.library, "lm_call_seconds")
    return exe, seconds, functions


def call_labels(source: str) -> list[str]:
    """The kernel each call of lm_run runs, as the comment on its line names it."""
    run = source.index("int lm_run(")
    return [m.group(3) for m in CALL.finditer(source[run : source.index("\n}", run)])]


def timed_runs(exe, feed: dict, seconds, repeats: int) -> tuple[np.ndarray, list[float]]:
    """(each call's minimum seconds over `repeats` runs of `exe` on `feed`, the runs' wall seconds): `seconds` is the
    clock array timed_executable returned with `exe`."""
    least, walls = np.full(len(seconds), np.inf), []
    for _ in range(repeats):
        start = time.perf_counter()
        exe.run(feed)
        walls.append(time.perf_counter() - start)
        least = np.minimum(least, np.array(seconds[:]))
    return least, walls
