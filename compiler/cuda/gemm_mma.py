"""CUDA for a half-type GEMM on tensor cores: the `nvcuda::wmma` API, m16n16k16 fragments, float32 accumulators.

A block of 4 warps computes a 64 x 64 output tile (the SIMT kernel's tile, so the grid is the same); each warp
holds a 32 x 32 quarter as 2 x 2 accumulator fragments. Per step of 32 along the contraction the block stages
A's 64 x 32 and B's 32 x 64 elements in shared memory in the operands' half type (compiler/cuda/half_operands.py:
they are exact in it), evaluating each operand's expression at the element's indices as the SIMT kernel does,
so guards, gathers and views need no other care and elements past an edge are 0. Then each warp runs two k16
steps of fragment loads and `mma_sync`s. The accumulators are stored to shared memory, and the epilogue runs on
each element from there, a thread per column of the tile walking its rows.

Shared-memory rows are padded by 8 halves (4 floats) so the warps' fragment loads do not fall on one bank; the
pads keep every fragment's address 32-byte aligned and its leading dimension a multiple of 16 bytes, as
load_matrix_sync and store_matrix_sync require. On the CPU the host shim runs this same source against a
stand-in for the wmma API (runtime/cuda/host_shim/mma.h).
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_operands import decode
from luminal.compiler.analysis.gemm_plan import GemmPlan
from luminal.compiler.cuda.mma_staging import stage, staging
from luminal.compiler.gpu.emitter import CudaEmitter
from luminal.compiler.gpu.gemm import tile_origin
from luminal.compiler.gpu.kernels import FOOT, head, pointers
from luminal.compiler.gpu.launch import GEMM_TILE, Launch
from luminal.compiler.kernels import ir
from luminal.compiler.renderer.dialects import CUDA
from luminal.view import ShapeTracker

THREADS = 128  # 4 warps, a 32 x 32 quarter of the tile each
STEP = 32  # contraction elements per shared-memory stage: two k16 fragment steps
FRAGMENT = 16
PAD = 8  # halves added to each shared row (a multiple of 8: 16 bytes, as wmma's leading dimensions need)
WMMA = "nvcuda::wmma"
CONVERT = {dt.float16: "__float2half_rn({})", dt.bfloat16: "__float2bfloat16_rn({})"}
WIDEN = {dt.float16: "__half2float", dt.bfloat16: "__bfloat162float"}
# The first architecture whose tensor cores multiply each half type (wmma: fp16 from sm_70, bf16 from sm_80).
# Compiled for an older one (a T4, sm_75, with bf16), the kernel computes the same tiles with FMAs from
# shared memory instead: the CUDA source does not depend on the target, so the choice is the preprocessor's.
FIRST_ARCH = {dt.float16: 700, dt.bfloat16: 800}
NO_MMA = "no tensor cores for this type: each thread sums its outputs from shared memory"


def _fragment(use: str, half: str, layout: str = "row_major") -> str:
    return f"{WMMA}::fragment<{WMMA}::{use}, {FRAGMENT}, {FRAGMENT}, {FRAGMENT}, {half}, {WMMA}::{layout}>"


def kernel_source(launch: Launch, k: ir.LoopKernel, gemm: GemmPlan, half: dt.DType, buffers, symbols) -> list[str]:
    c, shape, tile, t = gemm.contract, k.shape, GEMM_TILE, CUDA.storage[half]
    a = staging(c.a, c.var, gemm.m, c.extent, half, "a")
    b = staging(c.b, c.var, gemm.n, c.extent, half, "b")
    lda, ldc = STEP + PAD, tile + PAD // 2
    ldb, b_shape = (STEP + PAD, f"[{tile}][{STEP + PAD}];  // B's tile, [n][k]") if b.k_inner else (
        tile + PAD, f"[{STEP}][{tile + PAD}];  // B's tile, [k][n]")  # fmt: skip
    b_at = "lm_bs[{n}][{k}]" if b.k_inner else "lm_bs[{k}][{n}]"  # B's element (k, n) in shared memory
    cell = "lm_c[lm_i / 2][lm_i % 2]"  # the warp's lm_i-th accumulator fragment
    accumulator = f"{WMMA}::fragment<{WMMA}::accumulator, {FRAGMENT}, {FRAGMENT}, {FRAGMENT}, float>"
    old_arch = f"defined(__CUDA_ARCH__) && __CUDA_ARCH__ < {FIRST_ARCH[half]}"
    scalar = f"#if {old_arch}  // {NO_MMA}"
    lines = head(launch, buffers, symbols) + tile_origin(shape, gemm)
    lines += [
        f"  __shared__ __align__(32) {t} lm_as[{tile}][{lda}];  // A's tile, [m][k]",
        f"  __shared__ __align__(32) {t} lm_bs{b_shape}",
        f"  __shared__ __align__(32) float lm_cs[{tile}][{ldc}];  // the accumulators, for the epilogue",
        scalar,
        f"  for (int lm_t = threadIdx.x; lm_t < {tile * tile}; lm_t += {THREADS})",
        f"    lm_cs[lm_t / {tile}][lm_t % {tile}] = 0.0f;",
        "#else",
        "  const int lm_wm = threadIdx.x / 32 / 2 * 32, lm_wn = threadIdx.x / 32 % 2 * 32;  // the warp's quarter",
        f"  {accumulator} lm_c[2][2];",
        "  #pragma unroll",
        f"  for (int lm_i = 0; lm_i < 4; lm_i++) {WMMA}::fill_fragment({cell}, 0.0f);",
        "#endif",
        f"  for (int64_t lm_k0 = 0; lm_k0 < lm_K; lm_k0 += {STEP}) {{",
    ]
    convert = CONVERT[half]
    lines += stage(launch, a, c.var, shape, tile, STEP, "lm_as", "lm_m0", "lm_M", convert)
    lines += stage(launch, b, c.var, shape, tile, STEP, "lm_bs", "lm_n0", "lm_N", convert)
    widen = WIDEN[half]
    b_kk = b_at.format(k="lm_kk", n=f"lm_t % {tile}")
    b_fragment = b_at.format(k="lm_kk", n=f"lm_wn + {FRAGMENT} * lm_i")
    lines += [
        f"    {CUDA.barrier}",
        scalar,
        f"    for (int lm_t = threadIdx.x; lm_t < {tile * tile}; lm_t += {THREADS}) {{",
        f"      float lm_sum = lm_cs[lm_t / {tile}][lm_t % {tile}];",
        f"      for (int lm_kk = 0; lm_kk < {STEP}; lm_kk++)",
        f"        lm_sum = fmaf({widen}(lm_as[lm_t / {tile}][lm_kk]), {widen}({b_kk}), lm_sum);",
        f"      lm_cs[lm_t / {tile}][lm_t % {tile}] = lm_sum;",
        "    }",
        "#else",
        "    #pragma unroll",
        f"    for (int lm_kk = 0; lm_kk < {STEP}; lm_kk += {FRAGMENT}) {{",
        f"      {_fragment('matrix_a', t)} lm_fa[2];",
        f"      {_fragment('matrix_b', t, 'col_major' if b.k_inner else 'row_major')} lm_fb[2];",
        "      #pragma unroll",
        "      for (int lm_i = 0; lm_i < 2; lm_i++) {",
        f"        {WMMA}::load_matrix_sync(lm_fa[lm_i], &lm_as[lm_wm + {FRAGMENT} * lm_i][lm_kk], {lda});",
        f"        {WMMA}::load_matrix_sync(lm_fb[lm_i], &{b_fragment}, {ldb});",
        "      }",
        "      #pragma unroll",
        "      for (int lm_i = 0; lm_i < 4; lm_i++)",
        f"        {WMMA}::mma_sync({cell}, lm_fa[lm_i / 2], lm_fb[lm_i % 2], {cell});",
        "    }",
        "#endif",
        f"    {CUDA.barrier}",
        "  }",
        f"#if !({old_arch})",
        "  #pragma unroll",
        "  for (int lm_i = 0; lm_i < 4; lm_i++)",
        f"    {WMMA}::store_matrix_sync(&lm_cs[lm_wm + {FRAGMENT} * (lm_i / 2)][lm_wn + {FRAGMENT} * (lm_i % 2)], "
        f"{cell}, {ldc}, {WMMA}::mem_row_major);",
        "#endif",
        f"  {CUDA.barrier}",
    ]
    return lines + _epilogue(launch, k, gemm, buffers) + FOOT


def _epilogue(launch: Launch, k: ir.LoopKernel, gemm: GemmPlan, buffers) -> list[str]:
    """The rest of the body on each accumulated value, read from shared memory: a thread owns one column of the
    tile (its indices decoded once) and every (THREADS / 64)-th row of it."""
    tile, rows = GEMM_TILE, THREADS // GEMM_TILE
    e = CudaEmitter(pointers(launch))
    e.indent = 3
    value = e.emit(gemm.epilogue)
    out = ShapeTracker.contiguous(k.shape).index.render_c()
    lines = [
        f"  const int lm_col = threadIdx.x % {tile};",
        "  const int64_t lm_n = lm_n0 + lm_col;",
        "  if (lm_n < lm_N) {",
    ]
    lines += ["    " + s for s in decode("lm_n", k.shape, gemm.n)]
    lines += [
        f"    for (int lm_r = threadIdx.x / {tile}; lm_r < {tile}; lm_r += {rows}) {{",
        "      const int64_t lm_m = lm_m0 + lm_r;",
        "      if (lm_m >= lm_M) break;",
    ]
    lines += ["      " + s for s in decode("lm_m", k.shape, gemm.m)]
    lines += ["      const float lm_acc = lm_cs[lm_r][lm_col];", *e.lines]
    return lines + [f"      _q0[{out}] = {CUDA.store(value, buffers[k.out].dtype)};", "    }", "  }"]
