"""CUDA for a GEMM kernel (compiler/analysis/gemm_plan.py): a shared-memory tiled fp32 kernel with the fused epilogue.

A block computes a 64 x 64 tile of one batch element's output with 256 threads, each a 4 x 4 sub-tile in
registers. Per step of 16 along the contraction the block stages A's 64 x 16 and B's 16 x 64 elements in shared
memory, evaluating each operand's expression (a load, or a fused producer, a gather, a guard) at the element's
indices; elements past an edge are zero, so partial tiles need no other care. The epilogue (bias, activation,
residual, casts) runs on each accumulated value before the store. Products accumulate with fmaf, as the C GEMM
contracts to FMAs. Half-type GEMMs run on tensor cores instead (compiler/cuda/gemm_mma.py), staging their operands
with this kernel's operand loop (compiler/cuda/mma_staging.py).
"""

from __future__ import annotations

from luminal.compiler.analysis.gemm_operands import decode, extent
from luminal.compiler.analysis.gemm_plan import GemmPlan
from luminal.compiler.gpu.emitter import CudaEmitter
from luminal.compiler.gpu.kernels import FOOT, head, pointers
from luminal.compiler.gpu.launch import GEMM_TILE, Launch
from luminal.compiler.kernels import ir
from luminal.compiler.renderer.dialects import CUDA
from luminal.view import ShapeTracker

STEP = 16  # contraction elements per shared-memory stage
SUB = 4  # each thread's sub-tile is SUB x SUB outputs: 16 x 16 threads cover the 64 x 64 tile


def operand_loop(launch: Launch, value: ir.Value, k: str, rows: tuple[int, ...], shape, *, count: int, row: str,
                 depth: str, limit: str, place: str, convert: str = "{}") -> list[str]:  # fmt: skip
    """A loop of the block's threads over `count` elements of one operand's tile for this step: element lm_t
    is the operand at output row `row` (decoded into the output indices `rows`) and contraction index
    k0 + `depth`, stored at `place` as `convert` of its float value; elements past an edge are 0."""
    e = CudaEmitter(pointers(launch))
    e.indent = 4
    result = e.emit(value)
    lines = [
        f"    for (int lm_t = threadIdx.x; lm_t < {count}; lm_t += {launch.block}) {{",
        f"      const int64_t lm_row = {row}, {k} = lm_k0 + {depth};",
        "      float lm_v = 0.0f;",
        f"      if (lm_row < {limit} && {k} < lm_K) {{",
    ]
    lines += ["        " + s for s in decode("lm_row", shape, rows)]
    return (
        lines
        + e.lines
        + [f"        lm_v = {result};", "      }", f"      {place} = {convert.format('lm_v')};", "    }"]
    )


def _stage(launch: Launch, value: ir.Value, k: str, rows: tuple[int, ...], shape, side: str) -> list[str]:
    """One operand's 64 x 16 elements of this step in shared memory: A (side "a") at [k][m], read with k
    fastest; B at [k][n], read with n fastest (each walks its source's contiguous axis when it is a plain
    row-major matrix)."""
    tile = GEMM_TILE
    if side == "a":
        row, limit, place = f"lm_m0 + lm_t / {STEP}", "lm_M", f"lm_as[lm_t % {STEP}][lm_t / {STEP}]"
        depth = f"lm_t % {STEP}"
    else:
        row, limit, place = f"lm_n0 + lm_t % {tile}", "lm_N", f"lm_bs[lm_t / {tile}][lm_t % {tile}]"
        depth = f"lm_t / {tile}"
    return operand_loop(launch, value, k, rows, shape, count=tile * STEP, row=row, depth=depth, limit=limit,
                        place=place)  # fmt: skip


def tile_origin(shape, gemm: GemmPlan) -> list[str]:
    """The block's tile: M, N and K, the batch element (its indices decoded) and the tile's first row and
    column, from the block index (tiles of one batch element are consecutive, N fastest)."""
    tile, block = GEMM_TILE, CUDA.block_index
    lines = [
        f"  const int64_t lm_M = {extent(shape, gemm.m)}, lm_N = {extent(shape, gemm.n)};",
        f"  const int64_t lm_K = {gemm.contract.extent.render_c()};",
        f"  const int64_t lm_tm = (lm_M + {tile - 1}) / {tile}, lm_tn = (lm_N + {tile - 1}) / {tile};",
        f"  const int64_t lm_bt = {block} / (lm_tm * lm_tn);",
        f"  const int64_t lm_m0 = {block} / lm_tn % lm_tm * {tile}, lm_n0 = {block} % lm_tn * {tile};",
    ]
    return lines + ["  " + s for s in decode("lm_bt", shape, gemm.batch)]


def kernel_source(launch: Launch, k: ir.LoopKernel, gemm: GemmPlan, buffers, symbols) -> list[str]:
    c, shape, tile = gemm.contract, k.shape, GEMM_TILE
    cell = f"lm_c[lm_i / {SUB}][lm_i % {SUB}]"  # lm_i's accumulator, lm_i in [0, SUB * SUB)
    lines = head(launch, buffers, symbols) + tile_origin(shape, gemm)
    lines += [
        # A is stored k-major ([k][m]) so the inner loop reads a row of 4 m's; +4 keeps the transposing stores
        # of a warp off a single bank.
        f"  __shared__ float lm_as[{STEP}][{tile + 4}], lm_bs[{STEP}][{tile}];",
        f"  float lm_c[{SUB}][{SUB}];",
        "  #pragma unroll",
        f"  for (int lm_i = 0; lm_i < {SUB * SUB}; lm_i++) {cell} = 0.0f;",
        f"  const int lm_tx = threadIdx.x % {tile // SUB}, lm_ty = threadIdx.x / {tile // SUB};",
        f"  for (int64_t lm_k0 = 0; lm_k0 < lm_K; lm_k0 += {STEP}) {{",
    ]
    lines += _stage(launch, c.a, c.var, gemm.m, shape, "a") + _stage(launch, c.b, c.var, gemm.n, shape, "b")
    lines += [
        f"    {CUDA.barrier}",
        "    #pragma unroll",
        f"    for (int lm_kk = 0; lm_kk < {STEP}; lm_kk++) {{",
        f"      float lm_a[{SUB}], lm_b[{SUB}];",
        "      #pragma unroll",
        f"      for (int lm_i = 0; lm_i < {SUB}; lm_i++) {{",
        f"        lm_a[lm_i] = lm_as[lm_kk][lm_ty * {SUB} + lm_i];",
        f"        lm_b[lm_i] = lm_bs[lm_kk][lm_tx * {SUB} + lm_i];",
        "      }",
        "      #pragma unroll",
        f"      for (int lm_i = 0; lm_i < {SUB * SUB}; lm_i++)",
        f"        {cell} = fmaf(lm_a[lm_i / {SUB}], lm_b[lm_i % {SUB}], {cell});",
        "    }",
        f"    {CUDA.barrier}",
        "  }",
    ]
    return lines + _epilogue(launch, k, gemm, buffers) + FOOT


def _epilogue(launch: Launch, k: ir.LoopKernel, gemm: GemmPlan, buffers) -> list[str]:
    """The rest of the body on each of the thread's accumulated values, then the store. A row's indices are
    decoded once for its 4 columns: a decode divides by the dims, and 64-bit divisions by a symbol are calls
    whose saved registers spilled when all 16 were unrolled."""
    e = CudaEmitter(pointers(launch))
    e.indent = 4
    value = e.emit(gemm.epilogue)
    out = ShapeTracker.contiguous(k.shape).index.render_c()
    lines = [
        "  #pragma unroll",
        f"  for (int lm_i = 0; lm_i < {SUB}; lm_i++) {{",
        f"    const int64_t lm_m = lm_m0 + lm_ty * {SUB} + lm_i;",
        "    if (lm_m >= lm_M) continue;",
    ]
    lines += ["    " + s for s in decode("lm_m", k.shape, gemm.m)]
    lines += [
        "    #pragma unroll",
        f"    for (int lm_j = 0; lm_j < {SUB}; lm_j++) {{",
        f"      const int64_t lm_n = lm_n0 + lm_tx * {SUB} + lm_j;",
        "      if (lm_n >= lm_N) continue;",
    ]
    lines += ["      " + s for s in decode("lm_n", k.shape, gemm.n)]
    lines += ["      const float lm_acc = lm_c[lm_i][lm_j];"] + e.lines
    return lines + [f"      _q0[{out}] = {CUDA.store(value, buffers[k.out].dtype)};", "    }", "  }"]
