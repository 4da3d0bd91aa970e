"""How a tensor-core GEMM's operand tile reaches shared memory (compiler/cuda/gemm_mma.py).

Layout: A's tile is kept [m][k]. B's is kept [n][k] (read by a col_major fragment) when its source lies closer
along the contraction than along N (a linear layer's weight stored [out, in], attention's keys), else [k][n]
(a row_major fragment): either way consecutive threads read consecutive addresses of the source.

Reads: an operand that is a plain half load, contiguous along the contraction, whose rows and offset are
multiples of 8 elements apart and whose contraction length is a multiple of 8, is read 8 elements (16 bytes)
at a time and stored as such (`lm_load16`/`lm_store16`, which the host shim checks for alignment); any other
operand is evaluated element by element at its indices, as the SIMT kernel does, so fused producers, gathers
and guards keep working.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_operands import decode
from luminal.compiler.gpu.gemm import operand_loop
from luminal.compiler.gpu.kernels import pointers
from luminal.compiler.gpu.launch import Launch
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.affine import affine
from luminal.symbolic import Expr

VECTOR = 8  # half elements per 16-byte load

# A 16-byte copy that a GPU requires to be aligned; the host shim (LM_HOST_SHIM) checks that it is.
HELPERS = """#include <mma.h>
static __device__ inline uint4 lm_load16(const void* p) {
#ifdef LM_HOST_SHIM
  lm_shim_check_aligned(p, 16);
#endif
  return *(const uint4*)p;
}
static __device__ inline void lm_store16(void* p, uint4 v) {
#ifdef LM_HOST_SHIM
  lm_shim_check_aligned(p, 16);
#endif
  *(uint4*)p = v;
}"""


@dataclass(frozen=True)
class Staging:
    value: ir.Value  # the operand's expression, in the output indices and the contraction variable
    rows: tuple[int, ...]  # the output axes that index its rows (M for A, N for B)
    k_inner: bool  # tile stored [row][k] rather than [k][row]
    vector: ir.Load | None  # the half load read 16 bytes at a time, or None


def _multiple_of(e: Expr, n: int) -> bool:
    """Whether `e` is a multiple of `n` at every value of its symbols (an affine form with such coefficients)."""
    found = affine(e, sorted(e.symbols()))
    if found is None:
        return False
    offset, coefficients = found
    return all(c.is_const and int(c.value) % n == 0 for c in (offset, *coefficients.values()))


def _vector_load(v: ir.Value, k: str, rows: tuple[int, ...], extent: Expr, half: dt.DType) -> ir.Load | None:
    if not (isinstance(v, ir.Apply) and v.op == "Cast" and isinstance(v.args[0], ir.Load)):
        return None
    load = v.args[0]
    found = affine(load.index, [f"_i{j}" for j in rows] + [k])
    if load.dtype != half or found is None or not extent.is_const or int(extent.value) % VECTOR:
        return None
    offset, coefficients = found
    along_k = coefficients.pop(k)
    ok = along_k.is_const and int(along_k.value) == 1
    return load if ok and all(_multiple_of(c, VECTOR) for c in (offset, *coefficients.values())) else None


def _closer_along_k(v: ir.Value, k: str, rows: tuple[int, ...]) -> bool:
    loads = [n for n in ir.walk(v) if isinstance(n, ir.Load)]
    if len(loads) != 1:
        return False
    index, row = loads[0].index, f"_i{rows[-1]}"
    at = index.substitute({row: 0, k: 0})
    along_k, along_row = index.substitute({row: 0, k: 1}) - at, index.substitute({row: 1, k: 0}) - at
    return along_k.is_const and along_row.is_const and abs(along_k.value) < abs(along_row.value)


def staging(v: ir.Value, k: str, rows: tuple[int, ...], extent: Expr, half: dt.DType, side: str) -> Staging:
    k_inner = side == "a" or _closer_along_k(v, k, rows)
    return Staging(v, rows, k_inner, _vector_load(v, k, rows, extent, half) if k_inner else None)


def stage(launch: Launch, s: Staging, k: str, shape, tile: int, step: int, tile_name: str, origin: str,
          limit: str, convert: str) -> list[str]:  # fmt: skip
    """The block's loop that stores this step's tile of the operand in `tile_name`."""
    if s.vector is None and s.k_inner:
        return operand_loop(launch, s.value, k, s.rows, shape, count=tile * step, row=f"{origin} + lm_t / {step}",
                            depth=f"lm_t % {step}", limit=limit, place=f"{tile_name}[lm_t / {step}][lm_t % {step}]",
                            convert=convert)  # fmt: skip
    if s.vector is None:
        return operand_loop(launch, s.value, k, s.rows, shape, count=tile * step, row=f"{origin} + lm_t % {tile}",
                            depth=f"lm_t / {tile}", limit=limit, place=f"{tile_name}[lm_t / {tile}][lm_t % {tile}]",
                            convert=convert)  # fmt: skip
    per_row = step // VECTOR
    source = pointers(launch)[s.vector.buffer]
    lines = [
        f"    for (int lm_t = threadIdx.x; lm_t < {tile * per_row}; lm_t += {launch.block}) {{",
        f"      const int lm_r = lm_t / {per_row}, lm_kc = lm_t % {per_row} * {VECTOR};",
        f"      const int64_t lm_row = {origin} + lm_r, {k} = lm_k0 + lm_kc;",
        "      uint4 lm_w = make_uint4(0u, 0u, 0u, 0u);",
        f"      if (lm_row < {limit} && {k} < lm_K) {{",
    ]
    lines += ["        " + line for line in decode("lm_row", shape, s.rows)]
    lines += [f"        lm_w = lm_load16(&{source}[{s.vector.index.render_c()}]);", "      }"]
    return lines + [f"      lm_store16(&{tile_name}[lm_r][lm_kc], lm_w);", "    }"]
