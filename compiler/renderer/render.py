"""The C-like renderer: a kernel IR value tree as C-family code, written once for every dialect (dialects.py).

Semantics match the reference interpreter op for op: half-precision values compute in float and round to their
type after every op (as numpy does), integer arithmetic wraps, max propagates nan, int % 0 is 0. The code
generators (codegen_c.py for the CPU, compiler/cuda/ for CUDA) decide where the expressions go: loops over
OpenMP threads, or threads of a GPU grid.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_plan import Accumulated
from luminal.compiler.kernels import hoist, ir
from luminal.compiler.renderer import float64, integers
from luminal.compiler.renderer.dialects import COMPUTE, C, CDialect
from luminal.symbolic import Expr


def literal(value: float | int | bool, dtype: dt.DType) -> str:
    if dtype == dt.bool_:
        return "1" if value else "0"
    if dtype.is_int:
        return integers.literal(value, dtype)
    if dtype == dt.float64:
        return float64.literal(value)
    v = float(value)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return f"{v.hex()}f" if v >= 0 else f"(-{(-v).hex()}f)"


class Emitter:
    """Turns a value tree into C-like code in `dialect`: returns an expression, appending any statements it needs
    (loops, checks)."""

    def __init__(self, buffers: dict[str, str], dialect: CDialect = C):
        self.buffers = buffers  # buffer name -> local pointer name
        self.dialect = dialect
        self.lines: list[str] = []
        self.counter = 0
        self.indent = 1
        # Element-wise values read from two or more places, each computed once into a C local where it is first
        # needed: written out at every read, a chain whose links read their input several times (tanh's series,
        # mish = x tanh(softplus x)) grows the text exponentially. `named` holds the locals in scope.
        self.shared: set[ir.Value] = set()
        self.named: dict[ir.Value, str] = {}
        self.depth = 0  # emit() calls in progress: 0 where a new tree is started
        self.unbound = 0  # > 0 inside a reduction's body or a guard's value: no locals bound (see reduce, guard)
        self.reducing = 0  # > 0 inside a reduction's body

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def stmt(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def emit(self, v: ir.Value) -> str:
        if self.depth == 0:
            self.shared |= shared_values(v)
        self.depth += 1
        try:
            if isinstance(v, ir.Apply) and v in self.shared and not self.unbound:
                return self.named.get(v) or self.bind(v)
            return self.expression(v)
        finally:
            self.depth -= 1

    def bind(self, v: ir.Apply) -> str:
        value = self.apply(v)
        name = self.fresh("_tc")
        self.stmt(f"const {COMPUTE[v.dtype]} {name} = {value};")
        self.named[v] = name
        return name

    def expression(self, v: ir.Value) -> str:
        if isinstance(v, ir.Const):
            return literal(v.value, v.dtype)
        if isinstance(v, ir.Load):
            return self.dialect.load(self.buffers[v.buffer], v.index.render_c(), v.dtype)
        if isinstance(v, ir.IndexValue):
            return f"(({COMPUTE[v.dtype]}){v.expr.render_c()})"
        if isinstance(v, ir.Guard):
            return self.guard(v)
        if isinstance(v, ir.Apply):
            return self.apply(v)
        if isinstance(v, ir.Reduce):
            return self.reduce(v)
        if isinstance(v, ir.GatherLoad):
            return self.gather(v)
        if isinstance(v, ir.Contract):  # where no GEMM applies: the sum of products it is defined as
            return self.reduce(v.as_reduce())
        if isinstance(v, Accumulated):
            return "lm_acc"
        if isinstance(v, hoist.Hoisted):
            return v.name
        raise TypeError(f"no C for {type(v).__name__}")

    def guard(self, v: ir.Guard) -> str:
        """valid ? value : 0. Statements the value needs (a fused reduction's loop, a gather's check) run only
        where valid: at padded positions its indices may point outside the buffers."""
        mark = len(self.lines)
        self.indent += 1
        self.unbound += 1  # a local would turn the (vectorizable) conditional expression into a branch
        inner = self.emit(v.value)
        self.unbound -= 1
        self.indent -= 1
        zero = f"({COMPUTE[v.dtype]})0"
        if len(self.lines) == mark:
            return f"(({v.valid.render_c()}) ? ({inner}) : {zero})"
        body = self.lines[mark:]
        del self.lines[mark:]
        out = self.fresh("_tguard")
        self.stmt(f"{COMPUTE[v.dtype]} {out} = {zero};")
        self.stmt(f"if ({v.valid.render_c()}) {{")
        self.lines += body
        self.stmt(f"  {out} = {inner};")
        self.stmt("}")
        return out

    def gather(self, v: ir.GatherLoad) -> str:
        g, out = self.fresh("_tg"), self.fresh("_tv")
        at = self.emit(v.at)
        self.stmt(f"int64_t {g} = (int64_t)({at});")
        self.stmt(f"if ({g} < 0 || {g} >= {v.limit.render_c()}) {{ lm_err = 1; {g} = 0; }}")
        index = v.index.substitute({"_g": Expr_var(g)}).render_c()
        valid = v.valid.substitute({"_g": Expr_var(g)})
        load = self.dialect.load(self.buffers[v.buffer], index, v.dtype)
        self.stmt(f"{COMPUTE[v.dtype]} {out} = " + (load if valid == 1 else f"({valid.render_c()}) ? {load} : 0") + ";")
        return out

    def apply(self, v: ir.Apply) -> str:
        args = [self.emit(a) for a in v.args]
        src = v.args[0].dtype
        op = v.op
        if op == "Cast":
            return self.cast(args[0], src, v.dtype)
        if op in ("Log2", "Exp2", "Sin", "Sqrt"):
            return self.dialect.round(f"{self.dialect.function(op, v.dtype)}({args[0]})", v.dtype)
        if op == "Recip":
            one = "1.0" if v.dtype == dt.float64 else "1.0f"
            return self.dialect.round(f"({one} / {args[0]})", v.dtype)
        if op == "Select":  # choice in [0, k) (compiler/kernels/lower_select.py): options[choice]
            # A function, not `?:`: its arguments are computed unconditionally, so a loop calling exp2f for an
            # option still vectorizes (libmvec's versions are for calls outside branches) and picks by blending.
            choice, *options = args
            pick = "lm_selectd" if v.dtype == dt.float64 else "lm_selectf" if v.dtype.is_float else "lm_selecti"
            chosen = options[-1]
            for j in reversed(range(len(options) - 1)):
                chosen = f"{pick}(({choice}) == {j}, {options[j]}, {chosen})"
            return chosen if v.dtype.is_float else f"(({COMPUTE[v.dtype]}){chosen})"
        a, b = args
        if op == "Max":  # nan wins, as in MaxReduce
            if v.dtype.is_float:
                return f"{_max_helper(v.dtype)}({a}, {b})"
            # A function, not `a > b ? a : b`: the text of nested maxima stays linear, and GCC 12's SLP vectorizer
            # miscompiled the ternary form of a 4-way max of 0/1 values at -O2 (`all` over int32 gave wrong rows).
            return integers.maximum(a, b, v.dtype)
        if op == "LessThan":
            return f"((uint8_t)({a} < {b}))"
        if op == "Add":
            return f"({a} | {b})" if src == dt.bool_ else self.arithmetic("+", a, b, v.dtype)
        if op == "Mul":
            return f"({a} & {b})" if src == dt.bool_ else self.arithmetic("*", a, b, v.dtype)
        if op == "Mod":
            if src.is_float:
                return self.dialect.round(f"{self.dialect.function('Mod', v.dtype)}({a}, {b})", v.dtype)
            return integers.remainder(a, b, v.dtype)
        raise ValueError(f"unknown element-wise op {op}")

    def arithmetic(self, op: str, a: str, b: str, dtype: dt.DType) -> str:
        """a + b or a * b: half types rounded after the op, narrow integers wrapped to their type."""
        return integers.wrapping(op, a, b, dtype) if dtype.is_int else self.dialect.round(f"({a} {op} {b})", dtype)

    def cast(self, x: str, src: dt.DType, dst: dt.DType) -> str:
        if dst == dt.bool_:
            return f"((uint8_t)(({x}) != 0))"
        if dst.is_int and src == dt.float64:
            return float64.from_double(x, dst)
        if dst.is_int and src.is_float:
            return integers.from_float(x, dst)
        if dst == dt.float64:
            return f"((double)({x}))"
        if dst.is_float:  # from float64 through float, as the reference converts (luminal/ops.py: Cast)
            return self.dialect.round(f"((float)({x}))", dst)
        return f"(({COMPUTE[dst]})({x}))"

    def hoisted(self, v: ir.Value, variable: str, trips: Expr) -> ir.Value:
        """`v` with its reductions that do not read `variable` computed here, before the loop over it."""
        return self.hoisted_together((v,), variable, trips)[0]

    def hoisted_together(self, values: tuple[ir.Value, ...], variable: str, trips: Expr) -> list[ir.Value]:
        """`values` as `hoisted` gives each, a reduction that several of them read computed once for all."""
        table: dict[ir.Value, ir.Value] = {}
        for v in values:
            for r in hoist.invariant_reductions(v, variable, trips):
                if r in table:
                    continue
                value = self.emit(r)
                name = self.fresh("_thoist")
                self.stmt(f"const {COMPUTE[r.dtype]} {name} = {value};")
                table[r] = hoist.Hoisted(name, r.dtype)
        return [hoist.substitute(v, table) if table else v for v in values]

    def reduce(self, v: ir.Reduce) -> str:
        v = replace(v, body=self.hoisted(v.body, v.var, v.extent))
        acc = self.fresh("_tacc")
        float_sum = v.op == "sum" and v.dtype.is_float
        acc_type = "float" if float_sum and v.dtype != dt.float64 else COMPUTE[v.dtype]
        if v.op == "sum":
            init = "0"
        elif v.dtype.is_float:
            init = "-INFINITY"
        else:
            init = integers.literal(v.dtype.min, v.dtype)
        decl_at = len(self.lines)
        self.stmt(f"{acc_type} {acc} = {init};")
        loop_at = len(self.lines)
        self.stmt(self.reduction_loop(v))
        self.indent += 1
        # No locals bound in the body: a body that is one expression is what the vector forms below need (the
        # compiler still computes a repeated subexpression once); the locals bound outside stay in scope.
        self.unbound += 1
        self.reducing += 1
        body = self.emit(v.body)
        self.reducing -= 1
        self.unbound -= 1
        pure = self.dialect.vector_pragmas and len(self.lines) == loop_at + 1  # the body is one expression
        if v.op == "sum" and float_sum and pure:
            # A pure expression summed: let the compiler split it into vector lanes (partial sums, like
            # numpy's pairwise sum; float accumulators keep the lanes wide).
            self.lines.insert(loop_at, "  " * (self.indent - 1) + f"#pragma omp simd reduction(+:{acc})")
        elif float_sum:  # a sequential float sum accumulates in the dialect's wider type (double on the CPU)
            serial = f"{self.dialect.serial_sum_type} "
            self.lines[decl_at] = self.lines[decl_at].replace("float ", serial, 1)
        if v.op == "sum":
            self.stmt(f"{acc} += {body};")
        elif v.dtype.is_float and pure:
            # A pure expression's max: a vector max reduction, with nan tracked beside it (max propagates
            # nan, which a vector max does not), so the loop has no branch and no carried select.
            value, nan = self.fresh("_tval"), self.fresh("_tnan")
            self.lines.insert(decl_at + 1, "  " * (self.indent - 1) + f"int {nan} = 0;")
            self.lines.insert(
                loop_at + 1, "  " * (self.indent - 1) + f"#pragma omp simd reduction(max:{acc}) reduction(|:{nan})"
            )
            self.stmt(f"const {COMPUTE[v.dtype]} {value} = {body};")
            self.stmt(f"{acc} = {value} > {acc} ? {value} : {acc};")
            self.stmt(f"{nan} |= {value} != {value};")
            self.indent -= 1
            self.stmt("}")
            return self.dialect.round(f"({nan} ? NAN : {acc})", v.dtype)
        elif v.dtype.is_float:
            self.stmt(f"{acc} = {_max_helper(v.dtype)}({acc}, {body});")
        else:
            self.stmt(f"{acc} = ({body}) > {acc} ? ({body}) : {acc};")
        self.indent -= 1
        self.stmt("}")
        self.combine(v, acc)
        return self.dialect.round(f"(({COMPUTE[v.dtype]}){acc})", v.dtype)

    def reduction_loop(self, v: ir.Reduce) -> str:
        """The loop over a reduction's variable; a GPU emitter splits it over a group of threads."""
        return f"for (int64_t {v.var} = 0; {v.var} < {v.extent.render_c()}; {v.var}++) {{"

    def combine(self, v: ir.Reduce, acc: str) -> None:
        """Statements that fold the partial results of the threads that shared the loop (none on the CPU)."""


def _max_helper(dtype: dt.DType) -> str:
    """The nan-propagating max of two floats of `dtype` (each dialect's prelude defines both)."""
    return "lm_maxd" if dtype == dt.float64 else "lm_maxf"


def shared_values(root: ir.Value) -> set[ir.Value]:
    """The element-wise values of `root` that two or more places read (equal subtrees count as one value)."""
    readers: Counter[ir.Value] = Counter()
    seen, stack = {root}, [root]
    while stack:
        for child in ir.children(stack.pop()):
            if isinstance(child, ir.Apply):
                readers[child] += 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return {v for v, n in readers.items() if n > 1}


def Expr_var(name: str) -> Expr:  # noqa: N802 - a tiny constructor for a C local used inside an index
    from luminal.symbolic import var

    return var(name, -(2**62), 2**62)
