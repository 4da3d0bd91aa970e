"""C code generation for the CPU target: one C function per kernel and one entry point that runs them all.

Semantics match the reference interpreter op for op: half-precision values compute in float and round to
their type after every op (as numpy does), integer arithmetic wraps (compiled with -fwrapv), max
propagates nan, float sums run in vector lanes (or in double when sequential); compiler/renderer/render.py renders the
expressions in the C dialect. The entry point
`lm_run(buffers, dims)` is the single call a forward pass makes into generated code; it returns 0, or 1
when a gather/scatter index was out of range.
"""

from __future__ import annotations

import re

from luminal.compiler.analysis import int_gemm_plan
from luminal.compiler.cpu import (
    codegen_attention,
    codegen_gemm,
    codegen_qgemm,
    int_gemm,
    prepack,
    row_gathers,
    row_sums,
)
from luminal.compiler.kernels import hoist, in_place, ir
from luminal.compiler.renderer import float64, integers
from luminal.compiler.renderer.dialects import C
from luminal.compiler.renderer.render import Emitter
from luminal.symbolic import Expr, c_prelude
from luminal.view import ShapeTracker, dims_product

PARALLEL_MIN_WORK = 16384  # loop iterations, a reduction's included (hoist.loop_steps): below, one thread

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
"""
    + integers.prelude()
    + float64.prelude()
)


def _loops(
    shape: tuple[Expr, ...],
    body: list[str],
    parallel: bool,
    outer: list[str] = (),
    work: Expr | None = None,
    rows: bool = False,
) -> list[str]:
    """Nested loops over `shape` around `body` (already indented for the innermost level); `outer` runs in the
    second-innermost loop, before the innermost one (hoisted row statistics). They run on the OpenMP team when
    `parallel` and their `work` (loop iterations, the elements unless given) is PARALLEL_MIN_WORK or more; all of
    them when `rows` (the body holds the loops over the rows' elements), else all but the innermost."""
    lines = []
    pragma = ""
    if parallel and shape:
        # All loops but the innermost (kept whole for SIMD) share the threads: the outermost alone is often the
        # batch, 1 for a single request, which left the second core idle.
        shared = len(shape) if rows else len(shape) - 1
        collapse = f" collapse({shared})" if shared > 1 else ""
        work = work if work is not None else dims_product(shape)
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


_VALUE = "LM_VALUE"  # where the stored value goes in a store statement's text


def _row_versions(outer: Emitter, row: ir.Value, guards: list[Expr], last: str, extent: Expr, store: str) -> list[str]:
    """`outer`'s statements, then the loop over `last` storing `row` (by `store`), once per pattern of `guards`
    (row_gathers.row_guards), picked by which of them hold for the row."""
    pick = outer.fresh("_tpick")
    outer.stmt(f"const int {pick} = {' | '.join(f'(({c.render_c()}) ? {1 << j} : 0)' for j, c in enumerate(guards))};")
    lines, counter = list(outer.lines), outer.counter
    for pattern in range(1 << len(guards)):
        e = Emitter(outer.buffers)
        e.counter, e.indent = counter, 2  # fresh names must not shadow the hoisted ones
        value = e.emit(row_gathers.fixed(row, {c: bool(pattern >> j & 1) for j, c in enumerate(guards)}))
        e.stmt(store.replace(_VALUE, value))
        counter = e.counter
        loop = f"for (int64_t {last} = 0; {last} < {extent.render_c()}; {last}++) {{"
        lines += [f"  {'if' if pattern == 0 else 'else if'} ({pick} == {pattern}) {loop}", *e.lines, "  }"]
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
        t = C.storage[buffers[name].dtype]
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

    def store(value: str) -> str:
        return f"{out_ptr}[{_flat(k.shape)}] = {C.store(value, out_dtype)};"

    gemm = codegen_gemm.plan(k)
    if gemm is not None:
        q8 = codegen_qgemm.q8_operand(k, gemm, buffers)
        if q8 is not None:  # B is a Q8_0 weight: read as int8, dequantised in registers
            return "\n".join(codegen_qgemm.kernel_source(k, gemm, q8, Emitter, head, ptrs, store)), used
        return "\n".join(codegen_gemm.kernel_source(k, gemm, Emitter, head, ptrs, store, packed)), used
    integer = int_gemm_plan.plan(k)
    if integer is not None:  # int32 sums of int16-sized operands (a quantized matmul): packed int16 pairs
        return "\n".join(codegen_gemm.kernel_source(k, integer, Emitter, head, ptrs, store, integer=True)), used
    if isinstance(k, ir.LoopKernel) and isinstance(k.body, ir.Attend):
        return "\n".join(codegen_attention.kernel_source(k, Emitter, head, ptrs, store)), used
    head.append("  int lm_err = 0;")
    e = Emitter(ptrs)
    if isinstance(k, ir.LoopKernel) and k.shape:
        # Row statistics the body reads broadcast along the innermost loop are computed once per row, before it.
        outer = Emitter(ptrs)
        last = f"_i{len(k.shape) - 1}"
        row = outer.hoisted(k.body, last, k.shape[-1])
        if len(k.shape) > 1 and k.shape[-1].is_const and int(k.shape[-1]) <= row_sums.MAX_ROW:
            # A gathered sum along the row (a multi-LoRA product) is computed for the whole row first.
            n = str(int(k.shape[-1]))
            row = row_sums.swap_sums(outer, row, {last: k.shape[-1]}, [f"const int64_t {last} = _tj;"], n, n, last)
        if len(k.shape) > 1:  # a gather along the row (a paged KV cache's block) is resolved once per row
            row = row_gathers.hoist_gathers(outer, row, last, k.shape[-1])
        # The work is what runs: each row's hoisted statistics once, not once per element (a one-row norm at
        # decode looked like a row's worth of sums, and forked a thread team 25 times a step for 768 floats).
        work = dims_product(k.shape[:-1]) * hoist.loop_steps(k.body, last, k.shape[-1])
        guards = row_gathers.row_guards(row, last)[:2] if len(k.shape) > 1 else []
        if guards:  # the row's loop once per pattern of the guards that hold for whole rows
            lines = _row_versions(outer, row, guards, last, k.shape[-1], store(_VALUE))
            body = _loops(k.shape[:-1], lines, parallel=True, work=work, rows=True)
        else:
            e.counter = outer.counter  # fresh names must not shadow the hoisted ones
            value = e.emit(row)
            e.stmt(f"{out_ptr}[{_flat(k.shape)}] = {C.store(value, out_dtype)};")
            body = _loops(k.shape, e.lines, parallel=True, outer=outer.lines, work=work)
    elif isinstance(k, ir.LoopKernel):
        value = e.emit(k.body)
        e.stmt(f"{out_ptr}[{_flat(k.shape)}] = {C.store(value, out_dtype)};")
        body = _loops(k.shape, e.lines, parallel=True)  # no loops: a scalar
    else:
        body = []
        if not in_place.is_in_place(
            k, buffers
        ):  # in place, `out` is the destination already (compiler/kernels/in_place.py)
            value = e.emit(k.dest)
            e.stmt(f"{out_ptr}[{_flat(k.shape)}] = {C.store(value, out_dtype)};")
            body = _loops(k.shape, e.lines, parallel=True)
        s = Emitter(ptrs)
        at, src = s.emit(k.at), s.emit(k.src)
        s.stmt(f"int64_t _tat = (int64_t)({at});")
        store = f"{out_ptr}[_tat] = {C.store(src, out_dtype)};"
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
    gemms = [(k, plan) for k in p.kernels if (plan := codegen_gemm.plan(k)) is not None]
    integer = any(int_gemm_plan.plan(k) is not None for k in p.kernels)
    if gemms or integer:
        parts.append(codegen_gemm.PRELUDE)
    if integer:
        parts.append(int_gemm.PRELUDE)
    if any(codegen_qgemm.q8_operand(k, plan, p.buffers) for k, plan in gemms):
        parts.append(codegen_qgemm.PRELUDE)
    if any(codegen_qgemm.int8_by_int8(k, plan, p.buffers) for k, plan in gemms):
        parts.append(codegen_qgemm.W8A8_PRELUDE)
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
