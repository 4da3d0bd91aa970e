"""C for a kernel built around one GEMM: packed operands, a register-blocked micro-kernel, a fused epilogue.

A loop kernel whose body holds one float32 `ir.Contract` (reached from the root through element-wise ops
only) is a GEMM: each output index either feeds operand A only (an M index), B only (an N index), or both /
neither (a batch index). The kernel then runs as tasks over (batch, a chunk of M rows, a block of N columns):
for each block of the contraction, B's block is packed into 16-column panels and A into 6-row panels (the
operands' index expressions are evaluated while packing, so any view works and the micro-kernel only
streams contiguous memory), a 6x16 micro-kernel accumulates in twelve 8-lane vector registers, and finally
the rest of the kernel body (bias, activation, residual, casts) runs on each accumulated value and stores the
output element. The sizes follow the usual cache blocking: an A panel (6 x KC) stays in L1, a B block
(KC x NC) in L2.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal import dtypes as dt
from luminal.compiler import ir
from luminal.symbolic import Expr

MR, NR = 6, 16  # the micro-kernel's tile: 12 accumulators of 8 floats, plus 2 B vectors and 1 broadcast
MCH, NC, KC = 96, 64, 256  # most rows of a task's chunk, columns of its block, depth of a contraction block

PRELUDE = f"""
#include <stdlib.h>
typedef float lm_v8 __attribute__((vector_size(32)));
static __thread float* lm_gemm_scratch;  /* per thread: one A panel, one B block and the C tile */
static float* lm_gemm_buffers(void) {{
  if (!lm_gemm_scratch) lm_gemm_scratch = aligned_alloc(64, sizeof(float) * ({MR * KC} + {KC * NC} + {MCH * NC}));
  return lm_gemm_scratch;
}}
/* c[0:6, 0:16] (row stride ldc) += a (6 x kc, k-major) times b (kc x 16, k-major). */
static inline void lm_micro_6x16(int64_t kc, const float* restrict a, const float* restrict b, float* restrict c,
                                 int64_t ldc) {{
  lm_v8 c00 = {{0}}, c01 = {{0}}, c10 = {{0}}, c11 = {{0}}, c20 = {{0}}, c21 = {{0}};
  lm_v8 c30 = {{0}}, c31 = {{0}}, c40 = {{0}}, c41 = {{0}}, c50 = {{0}}, c51 = {{0}};
  for (int64_t k = 0; k < kc; k++) {{
    lm_v8 b0, b1;
    memcpy(&b0, b + 16 * k, 32);
    memcpy(&b1, b + 16 * k + 8, 32);
    const float* ak = a + 6 * k;
    c00 += ak[0] * b0; c01 += ak[0] * b1;
    c10 += ak[1] * b0; c11 += ak[1] * b1;
    c20 += ak[2] * b0; c21 += ak[2] * b1;
    c30 += ak[3] * b0; c31 += ak[3] * b1;
    c40 += ak[4] * b0; c41 += ak[4] * b1;
    c50 += ak[5] * b0; c51 += ak[5] * b1;
  }}
  lm_v8 rows[12] = {{c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51}};
  for (int r = 0; r < 12; r++) {{
    lm_v8 t;
    float* at = c + (r / 2) * ldc + (r % 2) * 8;
    memcpy(&t, at, 32);
    t += rows[r];
    memcpy(at, &t, 32);
  }}
}}
"""


@dataclass(frozen=True)
class Accumulated(ir.Value):
    """The GEMM's result for the current output element (a C local), standing where the Contract stood."""

    dtype: dt.DType


@dataclass(frozen=True)
class GemmPlan:
    contract: ir.Contract
    epilogue: ir.Value  # the kernel body with the Contract replaced by `Accumulated`
    batch: tuple[int, ...]  # output axes of each role, in order
    m: tuple[int, ...]
    n: tuple[int, ...]


def _index_vars(v: ir.Value) -> set[str]:
    names: set[str] = set()
    for node in ir.walk(v):
        for e in _exprs(node):
            names |= e.symbols()
    return names


def _exprs(node: ir.Value) -> list[Expr]:
    if isinstance(node, ir.Load):
        return [node.index]
    if isinstance(node, ir.Guard):
        return [node.valid]
    if isinstance(node, ir.IndexValue):
        return [node.expr]
    if isinstance(node, (ir.Reduce, ir.Contract)):
        return [node.extent]
    if isinstance(node, ir.GatherLoad):
        return [node.index, node.valid, node.limit]
    return []


def _lift(v: ir.Value) -> tuple[ir.Value, ir.Contract | None]:
    """`v` with its one Contract (reached through Apply nodes only) replaced by Accumulated, and that Contract."""
    if isinstance(v, ir.Contract):
        return Accumulated(v.dtype), v
    if isinstance(v, ir.Apply):
        found, args = None, []
        for a in v.args:
            lifted, c = _lift(a)
            args.append(lifted)
            found = found or c  # equal copies of the one Contract all become the one accumulator
        return replace(v, args=tuple(args)), found
    return v, None


def plan(kernel: ir.Kernel) -> GemmPlan | None:
    """How `kernel` runs as a GEMM, or None when it is not one (it is then emitted as plain loops)."""
    if not isinstance(kernel, ir.LoopKernel):
        return None
    if len({n for n in ir.walk(kernel.body) if isinstance(n, ir.Contract)}) != 1:
        return None
    epilogue, c = _lift(kernel.body)
    if c is None or not (c.dtype == c.a.dtype == c.b.dtype == dt.float32):
        return None  # under a guard, a reduction or a gather; or half/integer arithmetic (exact loops instead)
    a_vars, b_vars = _index_vars(c.a), _index_vars(c.b)
    axes = range(len(kernel.shape))
    m = tuple(j for j in axes if f"_i{j}" in a_vars and f"_i{j}" not in b_vars)
    n = tuple(j for j in axes if f"_i{j}" in b_vars and f"_i{j}" not in a_vars)
    if not m or not n:
        return None  # a batched dot product: nothing to tile
    batch = tuple(j for j in axes if j not in m and j not in n)
    return GemmPlan(c, epilogue, batch, m, n)


def _extent(shape: tuple[Expr, ...], axes: tuple[int, ...]) -> str:
    return " * ".join(f"(int64_t)({shape[j].render_c()})" for j in axes) or "1"


def _decode(flat: str, shape: tuple[Expr, ...], axes: tuple[int, ...]) -> list[str]:
    """Declare the output index variables of `axes` from their row-major position `flat`."""
    lines = []
    for pos, j in enumerate(axes):
        inner = _extent(shape, axes[pos + 1 :])
        lines.append(f"const int64_t _i{j} = ({flat}) / ({inner}) % (int64_t)({shape[j].render_c()});")
    return lines


def kernel_source(kernel: ir.LoopKernel, gemm: GemmPlan, emitter_cls, head: list[str], ptrs, out_store) -> list[str]:
    """The body lines of a GEMM kernel (after `head`, the pointer and symbol declarations)."""
    c, shape = gemm.contract, kernel.shape
    r = c.var
    lines = head + [
        "  int lm_err = 0;",
        f"  const int64_t lm_M = {_extent(shape, gemm.m)}, lm_N = {_extent(shape, gemm.n)};",
        f"  const int64_t lm_NB = {_extent(shape, gemm.batch)}, lm_K = {c.extent.render_c()};",
        "  if (lm_M <= 0 || lm_N <= 0 || lm_NB <= 0) return 0;",
        f"  const int64_t lm_mt = (lm_M + {MCH - 1}) / {MCH}, lm_nt = (lm_N + {NC - 1}) / {NC};",
        # Rows split evenly over the chunks (whole panels), so no task is a small remainder of the others.
        f"  const int64_t lm_mc = ((lm_M + lm_mt - 1) / lm_mt + {MR - 1}) / {MR} * {MR};",
        "  const int64_t lm_tasks = lm_NB * lm_mt * lm_nt;",
        "  #pragma omp parallel reduction(|:lm_err) if (lm_tasks > 1 && lm_M * lm_N * (lm_K + 1) >= 65536)",
        "  {",
        "    float* lm_ap = lm_gemm_buffers();",
        f"    float* lm_bp = lm_ap + {MR * KC};",
        f"    float* lm_ct = lm_bp + {KC * NC};",
        "    #pragma omp for schedule(dynamic)",
        "    for (int64_t lm_t = 0; lm_t < lm_tasks; lm_t++) {",
        "      const int64_t lm_bt = lm_t / (lm_mt * lm_nt);",
        f"      const int64_t lm_m0 = (lm_t / lm_nt) % lm_mt * lm_mc, lm_n0 = lm_t % lm_nt * {NC};",
        "      const int64_t lm_mlen = lm_M - lm_m0 < lm_mc ? lm_M - lm_m0 : lm_mc;",
        "      if (lm_mlen <= 0) continue;",
        f"      const int64_t lm_nlen = lm_N - lm_n0 < {NC} ? lm_N - lm_n0 : {NC};",
        f"      const int64_t lm_np = (lm_nlen + {NR - 1}) / {NR}, lm_mp = (lm_mlen + {MR - 1}) / {MR};",
    ]
    lines += ["      " + s for s in _decode("lm_bt", shape, gemm.batch)]
    lines += [
        f"      memset(lm_ct, 0, sizeof(float) * {MCH * NC});",
        f"      for (int64_t lm_k0 = 0; lm_k0 < lm_K; lm_k0 += {KC}) {{",
        f"        const int64_t lm_kl = lm_K - lm_k0 < {KC} ? lm_K - lm_k0 : {KC};",
    ]
    # B block: column panels of NR, each kl x NR, k-major; columns past the edge are zero.
    lines += [
        f"        for (int64_t lm_j = 0; lm_j < lm_np * {NR}; lm_j++) {{",
        f"          float* lm_dst = lm_bp + (lm_j / {NR}) * lm_kl * {NR} + lm_j % {NR};",
        *_zeros_past_edge("lm_j >= lm_nlen", NR, "          "),
    ]
    lines += ["          " + s for s in _decode("lm_n0 + lm_j", shape, gemm.n)]
    lines += _pack(emitter_cls, ptrs, c.b, r, NR, "          ")
    lines += ["        }"]
    # A panels of MR rows, each packed just before the micro-kernels that use it.
    lines += [
        "        for (int64_t lm_p = 0; lm_p < lm_mp; lm_p++) {",
        f"          for (int64_t lm_i = 0; lm_i < {MR}; lm_i++) {{",
        "            float* lm_dst = lm_ap + lm_i;",
        f"            const int64_t lm_row = lm_p * {MR} + lm_i;",
        *_zeros_past_edge("lm_row >= lm_mlen", MR, "            "),
    ]
    lines += ["            " + s for s in _decode("lm_m0 + lm_row", shape, gemm.m)]
    lines += _pack(emitter_cls, ptrs, c.a, r, MR, "            ")
    lines += [
        "          }",
        "          for (int64_t lm_q = 0; lm_q < lm_np; lm_q++)",
        f"            lm_micro_6x16(lm_kl, lm_ap, lm_bp + lm_q * lm_kl * {NR},",
        f"                          lm_ct + lm_p * {MR * NC} + lm_q * {NR}, {NC});",
        "        }",
        "      }",
    ]
    # Epilogue: the rest of the body, per output element of the tile.
    e = emitter_cls(ptrs)
    e.indent = 5
    value = e.emit(gemm.epilogue)
    lines += ["      for (int64_t lm_i = 0; lm_i < lm_mlen; lm_i++) {"]
    lines += ["        " + s for s in _decode("lm_m0 + lm_i", shape, gemm.m)]
    lines += ["        for (int64_t lm_j = 0; lm_j < lm_nlen; lm_j++) {"]
    lines += ["          " + s for s in _decode("lm_n0 + lm_j", shape, gemm.n)]
    lines += [f"          const float lm_acc = lm_ct[lm_i * {NC} + lm_j];"]
    lines += ["    " + s for s in e.lines]
    lines += ["          " + out_store(value), "        }", "      }", "    }", "  }", "  return lm_err;", "}"]
    return lines


def _zeros_past_edge(past: str, width: int, pad: str) -> list[str]:
    """A panel row or column past the matrix edge is packed as zeros (the micro-kernel always runs whole tiles)."""
    return [f"{pad}if ({past}) {{", f"{pad}  for (int64_t lm_q = 0; lm_q < lm_kl; lm_q++) lm_dst[lm_q * {width}] = 0;",
            f"{pad}  continue;", f"{pad}}}"]  # fmt: skip


def _pack(emitter_cls, ptrs, operand: ir.Value, r: str, width: int, pad: str) -> list[str]:
    """The loop that writes `operand` at contraction positions lm_k0 .. lm_k0 + lm_kl into a k-major panel."""
    e = emitter_cls(ptrs)
    e.indent = 0
    value = e.emit(operand)
    body = [f"const int64_t {r} = lm_k0 + lm_q;"] + [s.strip() for s in e.lines]
    body.append(f"lm_dst[lm_q * {width}] = {value};")
    return [pad + "for (int64_t lm_q = 0; lm_q < lm_kl; lm_q++) {"] + [pad + "  " + s for s in body] + [pad + "}"]
