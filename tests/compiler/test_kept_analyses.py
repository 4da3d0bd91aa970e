"""A kernel's GEMM and GEMV plans and launch shape are computed once per kernel object (compiler/kernels/ir.py's
`kept`), stay out of its pickle, and a changed kernel (a new object) gets its own."""

import pickle
from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.analysis import gemm_plan, gemv_plan
from luminal.compiler.gpu import launch
from luminal.compiler.kernels import ir
from luminal.symbolic import const, var
from luminal.view import idx


def _gemv() -> ir.LoopKernel:
    """out[n] = sum_r x[r] * w[n, r]: a GEMV over a [64, 32] weight."""
    r = var("_r0", 0, 31)
    product = ir.Apply("Mul", (ir.Load("x", r, dt.float32), ir.Load("w", idx(0, 64) * 32 + r, dt.float32)), dt.float32)
    return ir.LoopKernel("k1", "out", (const(64),), ir.Reduce("sum", "_r0", const(32), product, dt.float32))


def test_plans_are_kept_on_the_kernel_and_computed_once(monkeypatch):
    k = _gemv()
    found = gemv_plan.plan(k)
    assert found is not None and launch.loop_shape(k) == "gemv"
    calls = []
    monkeypatch.setattr(gemv_plan, "_plan", lambda kernel: calls.append(kernel))
    assert gemv_plan.plan(k) is found  # the kept plan, not computed again
    assert calls == []
    other = replace(k, name="k2")  # a new object: planned afresh
    gemv_plan.plan(other)
    assert calls == [other]


def test_a_pickled_kernel_leaves_its_kept_analyses_behind():
    k = _gemv()
    gemv_plan.plan(k), gemm_plan.roles(k), launch.loop_shape(k)
    assert any(key.startswith("_") for key in k.__dict__)
    copy = pickle.loads(pickle.dumps(k))
    assert copy == k and not any(key.startswith("_") for key in copy.__dict__)
    assert gemv_plan.plan(copy) == gemv_plan.plan(k)
