"""A program's launch plan is planned once per program (compiler/gpu/planned_once.py): asked again for the same
program it is not planned again, and a program that differs in any way (other kernel objects, another table, a
kernel more) is planned anew; the backends' plans are what their planners make."""

import copy
from dataclasses import replace

import pytest

from luminal import dtypes as dt
from luminal.compiler.cuda import program as cuda
from luminal.compiler.gpu.planned_once import planned_once
from luminal.compiler.kernels import ir
from luminal.compiler.metal import program as metal
from luminal.symbolic import const, var


def _program() -> ir.KernelProgram:
    """x -> t1 -> y, two element-wise kernels over 64 float32 elements."""
    p = ir.KernelProgram()
    for name, role in [("x", "input"), ("t1", "temp"), ("y", "output")]:
        p.buffers[name] = ir.Buffer(name, dt.float32, const(64), role)
    p.inputs["x"] = "x"
    for k, (src, out) in enumerate([("x", "t1"), ("t1", "y")]):
        body = ir.Apply("Sin", (ir.Load(src, var("_i0", 0, 63), dt.float32),), dt.float32)
        p.kernels.append(ir.LoopKernel(f"k{k}", out, (const(64),), body))
    p.outputs["y"] = ("y", (const(64),))
    return p


def test_the_same_program_is_planned_once():
    calls = []

    def planner(p, at_load=False):
        calls.append((len(p.kernels), at_load))
        return [((k,), k.name) for k in p.kernels]

    planned, p = planned_once(planner), _program()
    first = planned(p)
    assert planned(p) == first and calls == [(2, False)]
    planned(p).append("the caller's own list")
    assert planned(p) == first and calls == [(2, False)]
    planned(p, at_load=True)
    assert calls == [(2, False), (2, True)]
    planned(copy.deepcopy(p))  # equal kernels, other objects
    assert len(calls) == 3
    renamed = replace(p, buffers={**p.buffers, "t1": replace(p.buffers["t1"], dtype=dt.float16)})
    planned(renamed)  # the same kernel objects over another buffer table
    assert len(calls) == 4
    p.kernels.append(p.kernels[-1])  # a program edited in place is another program
    planned(p)
    assert calls[-1] == (3, False)


@pytest.mark.parametrize("backend", [cuda, metal])
def test_backend_plans_are_their_planners(backend):
    p = _program()
    for at_load in (False, True):
        assert backend.planned_launches(p, at_load) == backend.planned_launches.__wrapped__(p, at_load)
