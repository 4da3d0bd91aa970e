"""Gathered sums with their loops swapped: a row of them computed before the loop that reads it.

A kernel that sums a gathered operand along `r` for each `n` of its innermost loop (a multi-LoRA projection:
`sum_r x[b, r] * A[slot[b], r, n]`) is emitted by default with the sum inside the loop over `n`: one element at a
time, every read a scalar gather, the stack walked with a stride of the row length. Swapped, the loop over `r`
runs outside and the loop over `n` inside it, adding into one accumulator per `n`: the gathered reads are
contiguous in `n` and that loop vectorises (Punica's BGMV reads its per-row adapter the same way).

Each accumulator adds the same products in the same order as the unswapped loop does, in float where that loop
(a sum whose body has a gather's statements: sequential, compiler/renderer/render.py) used the dialect's serial
type, double: a GEMV's precision, as the GEMM's micro-kernel sums in float. Measured on the 16-row decode step of
bench/lora.py's small model (2 layers, hidden 192, AMD EPYC, one thread): the step's C took 1.33x and 1.06x the
base step's with float accumulators, against about 1.5x with double ones (load 6-7: noisy), whose
conversions doubled the work.
"""

from __future__ import annotations

from luminal.compiler.kernels import hoist, ir
from luminal.compiler.kernels.affine import affine
from luminal.compiler.renderer.dialects import COMPUTE
from luminal.compiler.renderer.render import Emitter, Expr_var
from luminal.symbolic import Expr, var

MAX_ROW = 4096  # accumulators per swapped sum, on the stack: 16 KiB of floats


def gathered_sums(v: ir.Value, axes: set[str]) -> list[ir.Reduce | ir.Contract]:
    """The outermost float sums in `v` (reached through element-wise ops only) that read a gathered operand and
    one of the loop variables `axes`, over an extent that does not, with no reduction inside."""
    found: list[ir.Reduce | ir.Contract] = []
    stack = [v]
    while stack:
        n = stack.pop()
        if isinstance(n, ir.Apply):
            stack.extend(reversed(n.args))
        elif _swappable(n, axes) and n not in found:
            found.append(n)
    return found


def _swappable(n: ir.Value, axes: set[str]) -> bool:
    if isinstance(n, ir.Contract):
        n = n.as_reduce()
    if not isinstance(n, ir.Reduce) or n.op != "sum" or not n.dtype.is_float:
        return False
    inner = list(ir.walk(n.body))
    return (
        any(isinstance(x, ir.GatherLoad) for x in inner)
        and not any(isinstance(x, (ir.Reduce, ir.Contract, ir.Attend)) for x in inner)
        and not n.extent.symbols() & axes
        and any(hoist.depends_on(n, a) for a in axes)
    )


def swap_sums(e: Emitter, v: ir.Value, extents: dict[str, Expr], decode: list[str], count: str, capacity: str,
              position: str) -> ir.Value:  # fmt: skip
    """`v` with its gathered sums (gathered_sums) computed by statements appended to `e`, which run before the
    loop over the variables of `extents` (each with its extent): each into an array of `capacity` accumulators,
    for the loop's `count` iterations, the loop's variables declared from the iteration `_tj` by the `decode`
    lines. In `v` each reads back as its accumulator at `position` (the loop's iteration, there)."""
    table: dict[ir.Value, ir.Value] = {}
    for found in gathered_sums(v, set(extents)):
        s = found.as_reduce() if isinstance(found, ir.Contract) else found
        row = e.fresh("_trow")
        e.stmt(f"float {row}[{capacity}];")
        e.stmt(f"for (int64_t _tj = 0; _tj < {count}; _tj++) {row}[_tj] = 0;")
        body, inside = _sliced(e, s, extents)
        e.stmt(f"if ({inside}) for (int64_t {s.var} = 0; {s.var} < {s.extent.render_c()}; {s.var}++) {{")
        e.stmt("  #pragma omp simd reduction(|:lm_err)")
        e.stmt(f"  for (int64_t _tj = 0; _tj < {count}; _tj++) {{")
        e.indent += 2
        for line in decode:
            e.stmt(line)
        e.unbound += 1  # one expression per product, as Emitter.reduce emits a sum's body
        e.reducing += 1
        body = e.emit(body)
        e.reducing -= 1
        e.unbound -= 1
        e.stmt(f"{row}[_tj] += {body};")
        e.indent -= 2
        e.stmt("  }")
        e.stmt("}")
        value = e.dialect.round(f"(({COMPUTE[s.dtype]}){row}[{position}])", s.dtype)
        table[found] = hoist.Hoisted(value, s.dtype)
    return hoist.substitute(v, table) if table else v


def _sliced(e: Emitter, s: ir.Reduce, extents: dict[str, Expr]) -> tuple[ir.Value, str]:
    """`s`'s body with each gather of a slice (a position `base + f(r, axes)`, base read before the loops: a row
    of a stack at the row's slot) read as a plain load from that base, and the C condition under which the
    loops run. Every position f takes lies in one range, checked once against the gather's limit before the
    loops (an error, as an out-of-range gather is, and no reads), so the loads walk the row contiguously
    where the element-wise check made each one a vector gather."""
    table: dict[ir.Value, ir.Value] = {}
    checks: list[str] = []
    loops = {**extents, s.var: s.extent}
    for g in ir.walk(s.body):
        split = _slice(g, loops) if isinstance(g, ir.GatherLoad) and g not in table else None
        if split is None:
            continue
        base, offsets, lo, hi = split
        name = e.fresh("_tbase")
        e.stmt(f"const int64_t {name} = (int64_t)({e.emit(base)});")
        inside = f"{name} + {lo} >= 0 && {name} + {hi} < {g.limit.render_c()}"
        e.stmt(f"if (!({inside})) lm_err = 1;")
        checks.append(f"({inside})")
        table[g] = ir.Load(g.buffer, Expr_var(name) + offsets, g.dtype)
    return (ir.rebuilt(s.body, table.get) if table else s.body), " && ".join(checks) or "1"


def _slice(g: ir.GatherLoad, loops: dict[str, Expr]) -> tuple[ir.Value, Expr, int, int] | None:
    """(base, offsets, lowest, highest) where `g` reads position base + offsets of its buffer: base a value the
    `loops` (variable: extent) do not change, offsets affine in them with constant coefficients and extents,
    whose lowest and highest values over the loops are given; None otherwise."""
    if not (g.valid == 1 and g.index == var("_g") and isinstance(g.at, ir.Apply) and g.at.op == "Add"):
        return None
    for base, offsets in (g.at.args, tuple(reversed(g.at.args))):
        if not isinstance(offsets, ir.IndexValue) or any(hoist.depends_on(base, v) for v in loops):
            continue
        if ir.holds(base, ir.GatherLoad, ir.Reduce, ir.Contract):
            continue
        names = sorted(offsets.expr.symbols())
        found = affine(offsets.expr, names) if set(names) <= loops.keys() else None
        if found is None or not found[0].is_const:
            continue
        lo = hi = int(found[0])
        for name, c in found[1].items():
            if not (c.is_const and loops[name].is_const):
                break
            reach = int(c) * (int(loops[name]) - 1)
            lo, hi = lo + min(0, reach), hi + max(0, reach)
        else:
            return base, offsets.expr, lo, hi
    return None
