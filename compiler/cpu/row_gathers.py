"""Gathers that walk along the row: looked up and range-checked once per row, read in the row as plain loads.

A kernel whose innermost loop copies a run of a gathered source (a paged KV cache: the block table read at the
row's block, then the block's 64 values of a head) is emitted by default with the whole gather per element: the
table read, its range check, the position's check, each writing lm_err, which keeps the loop scalar (about
6 GB/s for the 125M decode step's K and V gathers). Where the gathered position is `base + c * i` in the innermost
variable i, with base not reading i, the base (its own gathers included) is computed before the loop and the run
it spans checked once; the loop then reads `buffer[base + c * i]`, contiguous for c = 1, and vectorises.

The checks are the same: every element of the run is read in the loop (only guards that do not read i enclose
the gather, and they hold for the whole run or for none of it), so the run is out of range exactly when an
element is, and lm_err is set then; the run then reads as 0 where the per-element gather read position 0, which
no result shows (an out-of-range gather fails the run).
"""

from __future__ import annotations

from luminal.compiler.kernels import hoist, ir
from luminal.compiler.kernels.affine import affine
from luminal.compiler.renderer.render import Emitter, Expr_var
from luminal.symbolic import Expr, var


def hoist_gathers(e: Emitter, v: ir.Value, last: str, extent: Expr) -> ir.Value:
    """`v` with each gather along `last` (the innermost loop's variable, over `extent`) resolved by statements
    appended to `e`, which run before that loop, and read back in `v` as a load at the run's base."""
    if not (extent.is_const and int(extent) >= 1):
        return v
    found: dict[ir.GatherLoad, tuple[Expr, ...]] = {}
    clash: set[ir.GatherLoad] = set()
    stack: list[tuple[ir.Value, tuple[Expr, ...]]] = [(v, ())]
    seen: set[tuple[ir.Value, tuple[Expr, ...]]] = set()  # a subtree read in many places is walked once
    while stack:
        n, conditions = stack.pop()
        if (n, conditions) in seen:
            continue
        seen.add((n, conditions))
        if isinstance(n, ir.Apply):
            stack.extend((a, conditions) for a in n.args)
        elif isinstance(n, ir.Guard) and last not in n.valid.symbols():
            stack.append((n.value, (*conditions, n.valid)))
        elif isinstance(n, ir.GatherLoad):
            if found.setdefault(n, conditions) != conditions:
                clash.add(n)  # read under two different guards: which one to hoist it under is not clear
    table: dict[ir.Value, ir.Value] = {}
    for g, conditions in found.items():
        run = None if g in clash else _run(g, last, int(extent))
        if run is not None:
            table[g] = _resolved(e, g, conditions, last, *run)

    def change(n: ir.Value) -> ir.Value | None:
        if isinstance(n, ir.Guard) and n.value in table and n.valid in found[n.value]:
            return table[n.value]  # the run's own check holds only where this guard does
        return table.get(n)

    return ir.rebuilt(v, change) if table else v


def row_guards(v: ir.Value, last: str) -> list[Expr]:
    """The conditions of the guards in `v` (reached through element-wise ops and guards) that do not read `last`
    and guard a load: each holds for a whole row or for none of it. GCC leaves such a loop unswitched when its
    body is large (a concatenation of the gathered keys with the new key's RoPE), and a loop with a conditional
    load stays scalar; emitted once per pattern of these conditions (`fixed`), each loop is straight-line code.
    A guard of arithmetic alone is a select that vectorises as it is."""
    found: list[Expr] = []
    stack, seen = [v], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if isinstance(n, ir.Apply):
            stack.extend(n.args)
        elif isinstance(n, ir.Guard):
            loads = ir.holds(n.value, ir.Load, ir.GatherLoad)
            if loads and last not in n.valid.symbols() and n.valid not in found:
                found.append(n.valid)
            stack.append(n.value)
    return found


def fixed(v: ir.Value, holds: dict[Expr, bool]) -> ir.Value:
    """`v` with each guard whose condition `holds` names replaced by its value where it holds, else by 0."""

    def change(n: ir.Value) -> ir.Value | None:
        if isinstance(n, ir.Guard) and n.valid in holds:
            return fixed(n.value, holds) if holds[n.valid] else ir.Const(0, n.dtype)
        return None

    return ir.rebuilt(v, change)


def _run(g: ir.GatherLoad, last: str, n: int) -> tuple[ir.Value | None, Expr, int, int, int] | None:
    """(base, offset, step, lowest, highest): `g` reads position base + offset + step * last (base a value, or
    None for none; offset an index expression; neither reading `last`), whose lowest and highest values over the
    loop are base + offset + lowest and + highest; None when `g` is not so."""
    if not (g.valid == 1 and g.index == var("_g")) or last in g.limit.symbols():
        return None
    if isinstance(g.at, ir.IndexValue):
        parts = [(None, g.at)]
    elif isinstance(g.at, ir.Apply) and g.at.op == "Add":
        parts = [(b, o) for b, o in (g.at.args, tuple(reversed(g.at.args))) if isinstance(o, ir.IndexValue)]
    else:
        return None
    for base, offsets in parts:
        if base is not None and (hoist.depends_on(base, last) or ir.holds(base, ir.Reduce, ir.Contract, ir.Attend)):
            continue
        found = affine(offsets.expr, [last])
        if found is None or not found[1][last].is_const:
            continue
        step = int(found[1][last])
        reach = step * (n - 1)
        return base, found[0], step, min(0, reach), max(0, reach)
    return None


def _resolved(
    e: Emitter, g: ir.GatherLoad, conditions: tuple[Expr, ...], last: str, base: ir.Value | None, offset: Expr,
    step: int, lo: int, hi: int,
) -> ir.Value:  # fmt: skip
    """Statements computing `g`'s run base and checking its range where `conditions` hold; the load that reads
    the run, 0 where they do not (or the run is out of range)."""
    start, inside = e.fresh("_tbase"), e.fresh("_tin")
    e.stmt(f"int64_t {start} = 0; int {inside} = 0;")
    e.stmt(f"if ({' && '.join(f'({c.render_c()})' for c in conditions) or '1'}) {{")
    e.indent += 1
    e.unbound += 1  # locals bound in the block would be out of scope where the loop reads them
    at = f"(int64_t)({e.emit(base)}) + " if base is not None else ""
    e.unbound -= 1
    e.stmt(f"{start} = {at}(int64_t)({offset.render_c()});")
    e.stmt(f"{inside} = {start} + {lo} >= 0 && {start} + {hi} < {g.limit.render_c()};")
    e.stmt(f"if (!{inside}) lm_err = 1;")
    e.indent -= 1
    e.stmt("}")
    load = ir.Load(g.buffer, Expr_var(start) + var(last) * step, g.dtype)
    return ir.Guard(Expr_var(inside), load, g.dtype)
