"""Loop-invariant reductions: a reduction that does not depend on a loop's variable is computed once, outside it.

Fusion inlines a row statistic (a mean, a variance, a softmax's max and sum) into the kernel that reads it
broadcast along the row, and into the reduction that reads it under its own loop. Evaluated where it stands
it would be recomputed for every element of the row; hoisted, it runs once per row, and a whole layer norm
or softmax becomes one pass over rows in one kernel. The code generator hoists (codegen_c.py: out of a kernel's
innermost loop and out of every reduction's loop), and the cost model counts what it hoists as hoisted
(cost.py), so the fusion policy sees the same costs the generated code has; so does the C's guard on opening a
thread team (`loop_steps`).

A reduction under a `Guard` or a gather stays where it is: the guard is what keeps its reads in range. Nothing
is hoisted out of a loop that may run zero times: there the reads it would do were never asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal.compiler.kernels import ir
from luminal.dtypes import DType
from luminal.symbolic import Expr, as_expr


@dataclass(frozen=True)
class Hoisted(ir.Value):
    """The value of a hoisted reduction: a C local named `name`, computed before the loop."""

    name: str
    dtype: DType


def depends_on(v: ir.Value, variable: str) -> bool:
    """Whether `v` reads `variable` anywhere: an index, a validity, a bound, an extent."""
    for n in ir.walk(v):
        if isinstance(n, ir.Load):
            exprs = (n.index,)
        elif isinstance(n, ir.GatherLoad):
            exprs = (n.index, n.valid, n.limit)
        elif isinstance(n, ir.Guard):
            exprs = (n.valid,)
        elif isinstance(n, ir.IndexValue):
            exprs = (n.expr,)
        elif isinstance(n, (ir.Reduce, ir.Contract)):
            exprs = (n.extent,)
        elif isinstance(n, ir.Attend):
            exprs = (n.s_extent, n.e_extent)
        else:
            continue
        if any(variable in e.symbols() for e in exprs):
            return True
    return False


def invariant_reductions(v: ir.Value, variable: str, trips: Expr) -> list[ir.Reduce]:
    """The outermost reductions in `v` (reached through element-wise ops only) that do not read `variable`, the
    variable of a loop of `trips` iterations; none where that loop may run zero times."""
    found: list[ir.Reduce] = []
    if as_expr(trips).lo < 1:
        return found
    stack = [v]
    while stack:
        n = stack.pop()
        if isinstance(n, ir.Reduce):
            if not depends_on(n, variable):
                if n not in found:
                    found.append(n)
                continue
        if isinstance(n, ir.Apply):
            stack.extend(reversed(n.args))
    return found


def substitute(v: ir.Value, table: dict[ir.Value, ir.Value]) -> ir.Value:
    """`v` with each subtree that is a key of `table` replaced (through element-wise ops only, as found)."""
    if v in table:
        return table[v]
    if isinstance(v, ir.Apply):
        return replace(v, args=tuple(substitute(a, table) for a in v.args))
    return v


def loop_steps(v: ir.Value, variable: str, trips: Expr) -> Expr:
    """About how many loop iterations a loop of `trips` iterations over `variable` evaluating `v` runs as
    generated, its reductions' iterations included: the reductions hoisted out of it once, the rest every
    iteration. A one-row RMSNorm over 768 values is 2 x 768 (the row's sum, then the scaled row), where
    ir.steps_per_element counts the sum once per element (768 x 768)."""
    found = invariant_reductions(v, variable, trips)
    rest = substitute(v, {r: Hoisted(f"_h{j}", r.dtype) for j, r in enumerate(found)})
    return as_expr(trips) * _evaluation_steps(rest) + sum((_evaluation_steps(r) for r in found), as_expr(0))


def _evaluation_steps(v: ir.Value) -> Expr:
    """Loop iterations of evaluating `v` once: 1, plus each distinct reduction's loop_steps (element-wise work is
    the loop's own iteration; an equal reduction read twice is taken as computed once)."""
    steps, seen, stack = as_expr(1), set(), [v]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if isinstance(n, ir.Contract):  # where no GEMM applies it is emitted as the reduction it defines
            n = n.as_reduce()
        if isinstance(n, ir.Reduce):
            steps = steps + loop_steps(n.body, n.var, n.extent)
        else:
            stack.extend(ir.children(n))
    return steps
