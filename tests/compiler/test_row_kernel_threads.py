"""A row kernel's OpenMP guard (compiler/cpu/codegen_c.py) counts the loop iterations the kernel runs, its row
statistics once per row, as they run hoisted out of the row's loop (compiler/kernels/hoist.py), not once per
element. Counted per element, a one-row RMSNorm over 768 values (a one-stream decode step's, 25 of them a step)
looked like 768 x 768 steps and opened a thread team for under a microsecond of work; now it runs on one thread,
and 64 rows still share the team. Each compiled norm equals the reference interpreter."""

import re

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cpu.codegen_c import PARALLEL_MIN_WORK
from luminal.hl.normalization import layer_norm, rms_norm

HIDDEN = 768


def norm_graph(norm, rows: int, residuals: int) -> lm.Graph:
    """`norm` over the sum of `residuals` [rows, HIDDEN] inputs (a decode step's residual stream, fused into
    the norm that reads it), with a weight."""
    g = lm.Graph()
    parts = [g.input(f"x{j}", (rows, HIDDEN)) for j in range(residuals)]
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    norm(total, HIDDEN, g.weight("w", (HIDDEN,))).output("y")
    g.bind({"w": np.random.default_rng(1).standard_normal(HIDDEN).astype(np.float32)})
    return g


def guarded_work(source: str) -> list[int]:
    """The work each `#pragma omp parallel for ... if (W >= PARALLEL_MIN_WORK)` of a program with constant
    shapes weighs."""
    found = re.findall(r"#pragma omp parallel for.* if \((\d+)(?:LL)? >= (\d+)\)", source)
    assert found and all(int(limit) == PARALLEL_MIN_WORK for _, limit in found), found
    return [int(work) for work, _ in found]


@pytest.mark.parametrize("norm,residuals", [(rms_norm, 1), (rms_norm, 3), (layer_norm, 1)])
@pytest.mark.parametrize("rows", [1, 64])
def test_one_row_norm_runs_on_one_thread_and_many_rows_share_them(norm, residuals, rows):
    g = norm_graph(norm, rows, residuals)
    program = lm.compile(g, target="cpu", cache=False)
    work = guarded_work(program.source)
    if rows == 1:
        assert max(work) < PARALLEL_MIN_WORK, work  # one thread, no fork/join
    else:
        assert max(work) >= PARALLEL_MIN_WORK, work
    rng = np.random.default_rng(0)
    feed = {f"x{j}": rng.standard_normal((rows, HIDDEN)).astype(np.float32) for j in range(residuals)}
    np.testing.assert_allclose(program.run(feed)["y"], lm.run(g, feed)["y"], rtol=1e-5, atol=1e-5)
