"""C code generation for the CPU target: one C function per kernel and one entry point that runs them all.

Semantics match the reference interpreter op for op: half-precision values compute in float and round to
their type after every op (as numpy does), integer arithmetic wraps (compiled with -fwrapv), max
propagates nan, float sums run in vector lanes (or in double when sequential). The entry point
`lm_run(buffers, dims)` is the single call a forward pass makes into generated code; it returns 0, or 1
when a gather/scatter index was out of range.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler import codegen_attention, codegen_gemm, hoist, ir, prepack
from luminal.symbolic import Expr, as_expr, c_prelude
from luminal.view import ShapeTracker

STORAGE = {dt.float32: "float", dt.float16: "_Float16", dt.bfloat16: "uint16_t", dt.int32: "int32_t",
           dt.int64: "int64_t", dt.bool_: "uint8_t"}  # fmt: skip
COMPUTE = {dt.float32: "float", dt.float16: "float", dt.bfloat16: "float", dt.int32: "int32_t",
           dt.int64: "int64_t", dt.bool_: "uint8_t"}  # fmt: skip
PARALLEL_MIN_WORK = 16384  # element-steps (an output element times its reductions' extents): below, one thread

PRELUDE = (
    "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"
    # With LM_VECTOR_MATH (runtime/cpu.py defines it where glibc's libmvec links) loops that call exp2f,
    # log2f or sinf vectorise through libmvec's 8-lane versions (glibc: at most 4 ulp from the scalar ones,
    # special values handled); glibc's headers declare these only under -ffast-math, which we do not use.
    "#ifdef LM_VECTOR_MATH\n"
    '__attribute__((simd("notinbranch"))) float exp2f(float);\n'
    '__attribute__((simd("notinbranch"))) float log2f(float);\n'
    '__attribute__((simd("notinbranch"))) float sinf(float);\n'
    "#endif\n"
    + c_prelude()
    + """
static inline float lm_bf16_load(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t lm_bf16_store(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  /* nan stays a quiet nan */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  /* round to nearest even */
}
static inline float lm_round_f16(float f) { return (float)(_Float16)f; }
static inline float lm_round_bf16(float f) { return lm_bf16_load(lm_bf16_store(f)); }
static inline float lm_maxf(float acc, float v) { return (v > acc || v != v) ? v : acc; }
static inline float lm_selectf(int c, float a, float b) { return c ? a : b; }
static inline int64_t lm_selecti(int c, int64_t a, int64_t b) { return c ? a : b; }
"""
)


def _round(expr: str, dtype: dt.DType) -> str:
    """Round a float compute value to a half type, as the reference rounds after every op."""
    if dtype == dt.float16:
        return f"lm_round_f16({expr})"
    if dtype == dt.bfloat16:
        return f"lm_round_bf16({expr})"
    return expr


def _load(ptr: str, index: str, dtype: dt.DType) -> str:
    raw = f"{ptr}[{index}]"
    if dtype == dt.bfloat16:
        return f"lm_bf16_load({raw})"
    return f"(float){raw}" if dtype == dt.float16 else raw


def _store(value: str, dtype: dt.DType) -> str:
    if dtype == dt.bfloat16:
        return f"lm_bf16_store({value})"
    return f"({STORAGE[dtype]})({value})"


def literal(value: float | int | bool, dtype: dt.DType) -> str:
    if dtype == dt.bool_:
        return "1" if value else "0"
    if dtype.is_int:
        return f"((int64_t){int(value)}LL)" if dtype == dt.int64 else f"((int32_t){int(value)})"
    v = float(value)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return f"{v.hex()}f" if v >= 0 else f"(-{(-v).hex()}f)"


class Emitter:
    """Turns a value tree into C: returns an expression, appending any statements it needs (loops, checks)."""

    def __init__(self, buffers: dict[str, str]):
        self.buffers = buffers  # buffer name -> local pointer name
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
            return _load(self.buffers[v.buffer], v.index.render_c(), v.dtype)
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
        if isinstance(v, codegen_gemm.Accumulated):
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
        load = _load(self.buffers[v.buffer], index, v.dtype)
        self.stmt(f"{COMPUTE[v.dtype]} {out} = " + (load if valid == 1 else f"({valid.render_c()}) ? {load} : 0") + ";")
        return out

    def apply(self, v: ir.Apply) -> str:
        args = [self.emit(a) for a in v.args]
        src = v.args[0].dtype
        op = v.op
        if op == "Cast":
            return self.cast(args[0], src, v.dtype)
        if op in ("Log2", "Exp2", "Sin", "Sqrt"):
            return _round(f"{op.lower()}f({args[0]})", v.dtype)
        if op == "Recip":
            return _round(f"(1.0f / {args[0]})", v.dtype)
        if op == "Select":  # choice in [0, k) (compiler/lower_select.py): options[choice]
            # A function, not `?:`: its arguments are computed unconditionally, so a loop calling exp2f for an
            # option still vectorizes (libmvec's versions are for calls outside branches) and picks by blending.
            choice, *options = args
            pick = "lm_selectf" if v.dtype.is_float else "lm_selecti"
            chosen = options[-1]
            for j in reversed(range(len(options) - 1)):
                chosen = f"{pick}(({choice}) == {j}, {options[j]}, {chosen})"
            return chosen if v.dtype.is_float else f"(({COMPUTE[v.dtype]}){chosen})"
        a, b = args
        if op == "Max":  # nan wins, as in MaxReduce
            return f"lm_maxf({a}, {b})" if v.dtype.is_float else f"(({a}) > ({b}) ? ({a}) : ({b}))"
        if op == "LessThan":
            return f"((uint8_t)({a} < {b}))"
        if op == "Add":
            return f"({a} | {b})" if src == dt.bool_ else _round(f"({a} + {b})", v.dtype)
        if op == "Mul":
            return f"({a} & {b})" if src == dt.bool_ else _round(f"({a} * {b})", v.dtype)
        if op == "Mod":
            if src.is_float:
                return _round(f"fmodf({a}, {b})", v.dtype)
            t = COMPUTE[v.dtype]  # int % 0 is defined as 0 (the reference's choice); % -1 avoids MIN % -1
            return f"(({b}) == 0 || ({b}) == -1 ? ({t})0 : ({t})(({a}) % ({b})))"
        raise ValueError(f"unknown element-wise op {op}")

    def cast(self, x: str, src: dt.DType, dst: dt.DType) -> str:
        if dst == dt.bool_:
            return f"((uint8_t)(({x}) != 0))"
        if dst.is_int and src.is_float:
            return f"(({COMPUTE[dst]})truncf({x}))"
        if dst.is_float:
            return _round(f"((float)({x}))", dst)
        return f"(({COMPUTE[dst]})({x}))"

    def hoisted(self, v: ir.Value, variable: str, trips: Expr) -> ir.Value:
        """`v` with its reductions that do not read `variable` computed here, before the loop over it."""
        table: dict[ir.Value, ir.Value] = {}
        for r in hoist.invariant_reductions(v, variable, trips):
            value = self.emit(r)
            name = self.fresh("_thoist")
            self.stmt(f"const {COMPUTE[r.dtype]} {name} = {value};")
            table[r] = hoist.Hoisted(name, r.dtype)
        return hoist.substitute(v, table) if table else v

    def reduce(self, v: ir.Reduce) -> str:
        v = replace(v, body=self.hoisted(v.body, v.var, v.extent))
        acc = self.fresh("_tacc")
        float_sum = v.op == "sum" and v.dtype.is_float
        acc_type = "float" if float_sum else COMPUTE[v.dtype]
        if v.op == "sum":
            init = "0"
        elif v.dtype.is_float:
            init = "-INFINITY"
        else:
            init = "INT32_MIN" if v.dtype == dt.int32 else "INT64_MIN"
        decl_at = len(self.lines)
        self.stmt(f"{acc_type} {acc} = {init};")
        loop_at = len(self.lines)
        self.stmt(f"for (int64_t {v.var} = 0; {v.var} < {v.extent.render_c()}; {v.var}++) {{")
        self.indent += 1
        # No locals bound in the body: a body that is one expression is what the vector forms below need (the
        # compiler still computes a repeated subexpression once); the locals bound outside stay in scope.
        self.unbound += 1
        body = self.emit(v.body)
        self.unbound -= 1
        if v.op == "sum" and float_sum and len(self.lines) == loop_at + 1:
            # A pure expression summed: let the compiler split it into vector lanes (partial sums, like
            # numpy's pairwise sum; float accumulators keep the lanes wide).
            self.lines.insert(loop_at, "  " * (self.indent - 1) + f"#pragma omp simd reduction(+:{acc})")
        elif float_sum:  # a sequential float sum accumulates in double instead
            self.lines[decl_at] = self.lines[decl_at].replace("float ", "double ", 1)
        if v.op == "sum":
            self.stmt(f"{acc} += {body};")
        elif v.dtype.is_float and len(self.lines) == loop_at + 1:
            # A pure expression's max: a vector max reduction, with nan tracked beside it (max propagates
            # nan, which a vector max does not), so the loop has no branch and no carried select.
            value, nan = self.fresh("_tval"), self.fresh("_tnan")
            self.lines.insert(decl_at + 1, "  " * (self.indent - 1) + f"int {nan} = 0;")
            self.lines.insert(
                loop_at + 1, "  " * (self.indent - 1) + f"#pragma omp simd reduction(max:{acc}) reduction(|:{nan})"
            )
            self.stmt(f"const float {value} = {body};")
            self.stmt(f"{acc} = {value} > {acc} ? {value} : {acc};")
            self.stmt(f"{nan} |= {value} != {value};")
            self.indent -= 1
            self.stmt("}")
            return _round(f"({nan} ? NAN : {acc})", v.dtype)
        elif v.dtype.is_float:
            self.stmt(f"{acc} = lm_maxf({acc}, {body});")
        else:
            self.stmt(f"{acc} = ({body}) > {acc} ? ({body}) : {acc};")
        self.indent -= 1
        self.stmt("}")
        return _round(f"(({COMPUTE[v.dtype]}){acc})", v.dtype)


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


def steps_per_element(v: ir.Value) -> Expr:
    """About how many loop steps one output element costs: 1, times the extent of each reduction it runs.
    A row mean over 384 values is one output element per row but 384 steps; counting elements alone kept
    [8, 128, 1] means on one thread."""
    if isinstance(v, ir.Reduce):
        return v.extent * steps_per_element(v.body)
    if isinstance(v, ir.Contract):
        return v.extent * (steps_per_element(v.a) + steps_per_element(v.b))
    inner = [v.value] if isinstance(v, ir.Guard) else [v.at] if isinstance(v, ir.GatherLoad) else []
    inner += list(v.args) if isinstance(v, ir.Apply) else []
    return sum((steps_per_element(a) for a in inner), as_expr(1)).max(1)


def _loops(
    shape: tuple[Expr, ...], body: list[str], parallel: bool, outer: list[str] = (), steps: Expr | None = None
) -> list[str]:
    """Nested loops over `shape` around `body` (already indented for the innermost level); `outer` runs in the
    second-innermost loop, before the innermost one (hoisted row statistics). They run on the OpenMP team when
    `parallel` and the elements times `steps` per element are PARALLEL_MIN_WORK or more."""
    lines = []
    pragma = ""
    if parallel and shape:
        # All loops but the innermost (kept whole for SIMD) share the threads: the outermost alone is often the
        # batch, 1 for a single request, which left the second core idle.
        collapse = f" collapse({len(shape) - 1})" if len(shape) > 2 else ""
        work = ShapeTracker.contiguous(shape).numel() * (steps if steps is not None else as_expr(1))
        pragma = f"#pragma omp parallel for{collapse} reduction(|:lm_err) if ({work.render_c()} >= {PARALLEL_MIN_WORK})"
    if len(shape) == 1 and outer:  # the hoisted values are computed once, before the (parallel) loop
        lines += ["  " + line for line in outer]
    if pragma:
        lines.append("  " + pragma)
    for k, d in enumerate(shape):
        if k == len(shape) - 1 and k > 0:
            lines += ["  " * k + line for line in outer]
        lines.append("  " * (k + 1) + f"for (int64_t _i{k} = 0; _i{k} < {d.render_c()}; _i{k}++) {{")
    lines += ["  " * len(shape) + line for line in body]
    lines += ["  " * (k + 1) + "}" for k in reversed(range(len(shape)))]
    return lines


def _flat(shape: tuple[Expr, ...]) -> str:
    return ShapeTracker.contiguous(shape).index.render_c()


FUNCTION = "LM_FUNCTION"  # a kernel function's name in its text until kernels with equal text share one function
_REDUCTION_VARIABLE = re.compile(r"\b_r\d+\b")


def _head(used: list[str], out: str, buffers: dict[str, ir.Buffer], symbols: list[str]) -> list[str]:
    """A kernel function's opening: its symbols from D and a typed pointer per buffer it uses, the buffers
    named by position (`_q<j>` is B[S[j]]), so kernels that differ only in their buffers have equal text."""
    head = [f"static int {FUNCTION}(void** B, const int64_t* D, const int32_t* S) {{"]
    head += [f"  const int64_t {s} = D[{j}]; (void){s};" for j, s in enumerate(symbols)]
    for j, name in enumerate(used):
        t = STORAGE[buffers[name].dtype]
        qualifier = "" if name == out else "const "
        head.append(f"  {qualifier}{t}* restrict _q{j} = ({qualifier}{t}*)B[S[{j}]];")
    return head


def _pointers(used: list[str]) -> dict[str, str]:
    return {name: f"_q{j}" for j, name in enumerate(used)}  # a leading _ never clashes with a symbol name


def kernel_source(k: ir.Kernel, buffers: dict[str, ir.Buffer], symbols: list[str]) -> tuple[str, list[str]]:
    """The kernel's function (named FUNCTION) and the buffers its pointers S[0], S[1], ... stand for."""
    packed = prepack.packed_buffer(k, buffers)
    # By position, not by name: kernels that differ only in their buffers get one text (see _Functions).
    used = list(dict.fromkeys([k.out, *ir.buffers_in_order(k), *([packed] if packed else [])]))
    ptrs = _pointers(used)
    head = _head(used, k.out, buffers, symbols)
    out_ptr, out_dtype = ptrs[k.out], buffers[k.out].dtype
    gemm = codegen_gemm.plan(k)
    if gemm is not None:

        def store(value: str) -> str:
            return f"{out_ptr}[{_flat(k.shape)}] = {_store(value, out_dtype)};"

        return "\n".join(codegen_gemm.kernel_source(k, gemm, Emitter, head, ptrs, store, packed)), used
    if isinstance(k, ir.LoopKernel) and isinstance(k.body, ir.Attend):

        def store_element(value: str) -> str:
            return f"{out_ptr}[{_flat(k.shape)}] = {_store(value, out_dtype)};"

        return "\n".join(codegen_attention.kernel_source(k, Emitter, head, ptrs, store_element)), used
    head.append("  int lm_err = 0;")
    e = Emitter(ptrs)
    if isinstance(k, ir.LoopKernel) and k.shape:
        # Row statistics the body reads broadcast along the innermost loop are computed once per row, before it.
        outer = Emitter(ptrs)
        row = outer.hoisted(k.body, f"_i{len(k.shape) - 1}", k.shape[-1])
        e.counter = outer.counter  # fresh names must not shadow the hoisted ones
        value = e.emit(row)
        e.stmt(f"{out_ptr}[{_flat(k.shape)}] = {_store(value, out_dtype)};")
        body = _loops(k.shape, e.lines, parallel=True, outer=outer.lines, steps=steps_per_element(k.body))
    elif isinstance(k, ir.LoopKernel):
        value = e.emit(k.body)
        e.stmt(f"{out_ptr}[{_flat(k.shape)}] = {_store(value, out_dtype)};")
        body = _loops(k.shape, e.lines, parallel=True, steps=steps_per_element(k.body))
    else:
        value = e.emit(k.dest)
        e.stmt(f"{out_ptr}[{_flat(k.shape)}] = {_store(value, out_dtype)};")
        body = _loops(k.shape, e.lines, parallel=True)
        s = Emitter(ptrs)
        at, src = s.emit(k.at), s.emit(k.src)
        s.stmt(f"int64_t _tat = (int64_t)({at});")
        store = f"{out_ptr}[_tat] = {_store(src, out_dtype)};"
        s.stmt(f"if (_tat < 0 || _tat >= {k.limit.render_c()}) lm_err = 1; else {store}")
        body += _loops(k.src_shape, s.lines, parallel=False)  # in order: the last write of a repeated index wins
    return "\n".join(head + body + ["  return lm_err;", "}"]), used


def prepare_source(k: ir.Kernel, buffers: dict[str, ir.Buffer], symbols: list[str]) -> tuple[str, list[str]] | None:
    """The function that fills `k`'s packed weight panels (named FUNCTION), or None when it has none."""
    packed = prepack.packed_buffer(k, buffers)
    if packed is None:
        return None
    used = list(dict.fromkeys([*ir.buffers_in_order(k), packed]))
    head = _head(used, packed, buffers, symbols)
    lines = codegen_gemm.prepare_source(k, codegen_gemm.plan(k), Emitter, head, _pointers(used), packed)
    return "\n".join(lines), used


class _Functions:
    """Kernel functions by their text: one C function per distinct text (the layers of a transformer are the
    same kernels over different buffers: six layers' worth of C would take the C compiler six times as long)."""

    def __init__(self, slots: dict[str, int]):
        self.slots = slots
        self.names: dict[str, str] = {}  # canonical text -> function name

    def call(self, text: str, used: list[str], kernel: str) -> str:
        """The statement that runs the kernel: its function called with its buffers' slots."""
        renamed: dict[str, str] = {}  # reduction variables numbered by first appearance
        text = _REDUCTION_VARIABLE.sub(lambda m: renamed.setdefault(m.group(0), f"_r{len(renamed)}"), text)
        name = self.names.setdefault(text, f"lm_f{len(self.names)}")
        table = ", ".join(str(self.slots[u]) for u in used)
        return f"  if ({name}(B, D, (const int32_t[]){{{table}}})) return 1;  /* {kernel} */"

    def sources(self) -> list[str]:
        return [text.replace(FUNCTION, name, 1) for text, name in self.names.items()]


def program_source(p: ir.KernelProgram, slots: dict[str, int], symbols: list[str]) -> str:
    parts = [PRELUDE]
    if any(codegen_gemm.plan(k) for k in p.kernels):
        parts.append(codegen_gemm.PRELUDE)
    if any(isinstance(k, ir.LoopKernel) and isinstance(k.body, ir.Attend) for k in p.kernels):
        parts.append(codegen_attention.PRELUDE)
    functions = _Functions(slots)
    calls = [functions.call(*kernel_source(k, p.buffers, symbols), k.name) for k in p.kernels]
    prepared = []
    for k in p.kernels:
        source = prepare_source(k, p.buffers, symbols)
        if source is not None:
            prepared.append(functions.call(*source, f"{k.name}'s packed weights"))
    parts += functions.sources()
    parts.append("int lm_run(void** B, const int64_t* D) {\n" + "\n".join(calls + ["  return 0;"]) + "\n}")
    # Called once per loaded program, after the weights are bound: fills the packed buffers.
    parts.append("int lm_prepare(void** B, const int64_t* D) {\n" + "\n".join(prepared + ["  return 0;"]) + "\n}")
    return "\n\n".join(parts) + "\n"
