"""C for a kernel built around one GEMM: packed operands, a register-blocked micro-kernel, a fused epilogue.

A loop kernel whose body holds one float32 `ir.Contract` (reached from the root through element-wise ops
only) is a GEMM: each output index either feeds operand A only (an M index), B only (an N index), or both /
neither (a batch index). The kernel runs in two parallel phases:

1. Operands (compiler/analysis/gemm_operands.py). A is read in place when it is a strided matrix, else copied into
   k-major panels of LM_MR rows; B is copied into panels of LM_NR columns, or was copied once when the
   program was loaded (compiler/cpu/prepack.py: a function of weights alone). An operand that reads no batch
   index is packed once, not per batch element.
2. Tiles. Tasks over (batch, a chunk of M rows, a chunk of N columns) accumulate the contraction in blocks of
   LM_KC into a per-thread C tile with the micro-kernel, then run the rest of the kernel body (bias,
   activation, residual, casts) on each accumulated value and store the output element.

The same loops run the integer GEMM (compiler/cpu/int_gemm.py: `integer=True`), with int16 panels in pairs of k, an
int32 tile and its own micro-kernel; both of its operands are packed.

The micro-kernel's shape is chosen when the C is compiled: 12x32 in 24 sixteen-lane accumulators where the
compiler targets AVX-512 (32 vector registers), 6x16 in 12 eight-lane ones elsewhere (16 registers). Measured
on this project's 2-core AVX-512 machine, one thread: 180 GFLOP/s for 12x32 against 85 for 6x16 (AMD Zen 5); on a
Zen 4 EPYC, 110-116 GFLOP/s at the MiniLM encoder's shapes, 93-97% of the 118 its FMA loop reaches and above
torch's oneDNN (88-102; `bench/gemm_roofline.py`, where 8 or 14 rows or other LM_KC blockings did no better).
A last panel of fewer rows runs a kernel of 4 or 8 rows (lm_micro_edge): a 16-row decode step of the 125M bench
Llama went from 40.3 to 33.7 ms (`bench/step_kernels.py --rows 16`, AMD EPYC). On AVX2 one of 2 rows runs lm_micro2
(a 32-row GEMM's last panel): on a 2-vCPU Zen 3 EPYC (FMA loop 92-102 GFLOP/s, one thread) the encoder's 32-row
linears went from 74-80 to 82-89 GFLOP/s, 20 rows from 67 to 79-83 (`bench/gemm_roofline.py`, load 3.5).
"""

from __future__ import annotations

from luminal.compiler.analysis.gemm_operands import decode, direct_rows, extent, pack_phase
from luminal.compiler.analysis.gemm_plan import Accumulated, GemmPlan, index_vars, plan
from luminal.compiler.cpu import row_sums
from luminal.compiler.kernels import ir

__all__ = ["PRELUDE", "Accumulated", "GemmPlan", "index_vars", "kernel_source", "plan", "prepare_source"]

# A task's chunk is at most LM_MCP row panels by LM_NCP column panels; its C tile lives on the thread's stack.
PRELUDE = """
#include <omp.h>
#include <stdlib.h>
#if defined(__AVX512F__)
#ifndef LM_MR /* a build may set the tile's rows (-DLM_MR=...: bench/gemm_roofline.py compares them) */
#define LM_MR 12
#endif
#define LM_NR 32
#define LM_VBYTES 64
#else
#ifndef LM_MR
#define LM_MR 6
#endif
#define LM_NR 16
#define LM_VBYTES 32
#endif
#define LM_VL (LM_VBYTES / 4)
#ifndef LM_MCP
#define LM_MCP 16
#endif
#ifndef LM_NCP
#define LM_NCP 4
#endif
#define LM_MCH (LM_MCP * LM_MR)
#define LM_NCH (LM_NCP * LM_NR)
#ifndef LM_KC
#define LM_KC 256
#endif
typedef float lm_vf __attribute__((vector_size(LM_VBYTES)));
/* The packed operands of the GEMM being run, per calling thread (kernels run one after another on it). */
static __thread float* lm_pack_buffer;
static __thread int64_t lm_pack_capacity;
static float* lm_gemm_pack_buffer(int64_t floats) {
  if (floats > lm_pack_capacity) {
    free(lm_pack_buffer);
    int64_t bytes = (floats * 4 + 63) / 64 * 64;
    lm_pack_buffer = aligned_alloc(64, (size_t)bytes);
    lm_pack_capacity = lm_pack_buffer ? floats : 0;
  }
  return lm_pack_buffer;
}
/* How many chunks of row and column panels. A dynamic schedule hands the tasks to the threads, so the busiest
   thread multiplies at most ceil(tasks / threads) chunks of the largest size: that bound, in panel pairs, is what
   a split costs. Among splits into chunks of at most LM_MCP x LM_NCP panels (rows and columns each split
   evenly, as the kernel does), the one with the fewest tasks whose bound is within 1/32 of the least: larger
   chunks reuse more of their operands. 9 equal tasks on 2 threads ran as 5 and 4 (a 128 x 384 output); 4 run
   as 2 and 2. */
static int64_t lm_gemm_span(int64_t nb, int64_t mp, int64_t np, int64_t mt, int64_t nt, int64_t threads) {
  const int64_t mcp = (mp + mt - 1) / mt, ncp = (np + nt - 1) / nt;
  const int64_t tasks = nb * ((mp + mcp - 1) / mcp) * ((np + ncp - 1) / ncp);
  return (tasks + threads - 1) / threads * mcp * ncp;
}
static void lm_gemm_chunks(int64_t nb, int64_t mp, int64_t np, int64_t* mt, int64_t* nt) {
  const int64_t threads = omp_get_max_threads();
  const int64_t mt0 = (mp + LM_MCP - 1) / LM_MCP, nt0 = (np + LM_NCP - 1) / LM_NCP;
  /* Splits up to 4x finer than the coarsest in each direction: enough to even out any thread count the chunk
     sizes allow, without a search over every split of a long matrix. */
  const int64_t mtl = mp < 4 * mt0 ? mp : 4 * mt0, ntl = np < 4 * nt0 ? np : 4 * nt0;
  int64_t least = -1;
  for (int64_t m = mt0; m <= mtl; m++)
    for (int64_t n = nt0; n <= ntl; n++) {
      const int64_t span = lm_gemm_span(nb, mp, np, m, n, threads);
      if (least < 0 || span < least) least = span;
    }
  *mt = mt0;
  *nt = nt0;
  int64_t fewest = -1;
  for (int64_t m = mt0; m <= mtl; m++)
    for (int64_t n = nt0; n <= ntl; n++) {
      if (32 * lm_gemm_span(nb, mp, np, m, n, threads) > 33 * least) continue;
      if (fewest < 0 || m * n < fewest) {
        fewest = m * n;
        *mt = m;
        *nt = n;
      }
    }
}
/* c[0:ROWS, 0:NR] (row stride ldc) = (first ? 0 : c) + A (ROWS x kc, element (i, k) at A_AT) times b (kc x NR,
   k-major): the first contraction block stores, so the C tile needs no clearing. Two readings of A: packed
   panels (k-major, lm_micro) and rows of a matrix read in place (lm_micro_rows). A panel's last rows past M are
   padding: lm_micro_edge runs a kernel of fewer rows on an edge panel (16 rows were a full 12-row panel and an
   edge of 4 run as 12: 24 rows of FMAs for 16).
   Each k step also prefetches row k of the block at pf (the block multiplied next, or this one again): weights
   larger than the cache come from memory, where the hardware prefetcher alone fed the 16-row step's GEMMs 23 GB/s
   of the 50 torch.sum reads (37 GB/s with this), the first row panel of each block waiting on its lines. On a
   2-vCPU AMD Zen 5 (bench/encoder_peers.py's encoder, 42 MB of weights; -DLM_NO_BPREFETCH builds without) a
   32-token batch ran 1.39-1.51x as fast so, 128 tokens 1.11x, 8 x 128 1.02-1.06x; the 125M Llama's 16-row decode
   step 23.5 -> 16.8 ms (bench/step_kernels.py --rows 16). */
#if defined(LM_NO_BPREFETCH)
#define LM_PREFETCH_B(p) ((void)(p))
#elif LM_NR == 32 /* a k's 32 floats span two cache lines */
#define LM_PREFETCH_B(p) (__builtin_prefetch((p), 0, 3), __builtin_prefetch((p) + 16, 0, 3))
#else
#define LM_PREFETCH_B(p) __builtin_prefetch((p), 0, 3)
#endif
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast") /* the program is built with contraction off; a GEMM needs its FMAs */
#define LM_MICRO(NAME, A_AT, ROWS)                                                                           \\
  static inline void NAME(int64_t kc, const float* restrict a, int64_t lda, const float* restrict b,        \\
                          float* restrict c, int64_t ldc, int first, const float* pf) {                      \\
    (void)lda; (void)pf;                                                                                     \\
    lm_vf acc0[ROWS], acc1[ROWS];                                                                            \\
    _Pragma("GCC unroll 16") for (int i = 0; i < ROWS; i++) { acc0[i] = (lm_vf){0}; acc1[i] = (lm_vf){0}; }  \\
    for (int64_t k = 0; k < kc; k++) {                                                                       \\
      LM_PREFETCH_B(pf + LM_NR * k);                                                                         \\
      lm_vf b0, b1;                                                                                          \\
      memcpy(&b0, b + LM_NR * k, LM_VBYTES);                                                                 \\
      memcpy(&b1, b + LM_NR * k + LM_VL, LM_VBYTES);                                                         \\
      _Pragma("GCC unroll 16") for (int i = 0; i < ROWS; i++) {                                              \\
        const float ai = A_AT;                                                                               \\
        acc0[i] += ai * b0;                                                                                  \\
        acc1[i] += ai * b1;                                                                                  \\
      }                                                                                                      \\
    }                                                                                                        \\
    _Pragma("GCC unroll 16") for (int i = 0; i < ROWS; i++) {                                                \\
      lm_vf t0 = acc0[i], t1 = acc1[i], old0, old1;                                                          \\
      if (!first) {                                                                                          \\
        memcpy(&old0, c + i * ldc, LM_VBYTES);                                                               \\
        memcpy(&old1, c + i * ldc + LM_VL, LM_VBYTES);                                                       \\
        t0 += old0;                                                                                          \\
        t1 += old1;                                                                                          \\
      }                                                                                                      \\
      memcpy(c + i * ldc, &t0, LM_VBYTES);                                                                   \\
      memcpy(c + i * ldc + LM_VL, &t1, LM_VBYTES);                                                           \\
    }                                                                                                        \\
  }
LM_MICRO(lm_micro, a[LM_MR * k + i], LM_MR)
LM_MICRO(lm_micro_rows, a[i * lda + k], LM_MR)
LM_MICRO(lm_micro4, a[LM_MR * k + i], 4)
#if LM_MR > 8
LM_MICRO(lm_micro8, a[LM_MR * k + i], 8)
#endif
#if !defined(__AVX512F__) && !defined(LM_NO_MICRO2)
/* The first two rows of a k-major panel, even and odd k accumulated apart: eight chains of FMAs in flight, what two
   pipes of four cycles' latency need (two rows alone would be four, half the rate, as slow as lm_micro4). A 32-row
   GEMM's last panel of 2 rows ran as 4: 34 rows of FMAs for 32. -DLM_NO_MICRO2 leaves it out (for an A/B through
   bench/gemm_roofline.py --variant). */
static inline void lm_micro2(int64_t kc, const float* restrict a, const float* restrict b, float* restrict c,
                             int64_t ldc, int first) {
  lm_vf e[2][2] = {{{0}}}, o[2][2] = {{{0}}};
  int64_t k = 0;
  for (; k + 2 <= kc; k += 2) {
    lm_vf bk[4]; /* rows k and k + 1 of the block lie together: 2 LM_NR floats */
    _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) memcpy(&bk[v], b + LM_NR * k + v * LM_VL, LM_VBYTES);
    _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
      const float even = a[LM_MR * k + i], odd = a[LM_MR * (k + 1) + i];
      e[i][0] += even * bk[0];
      e[i][1] += even * bk[1];
      o[i][0] += odd * bk[2];
      o[i][1] += odd * bk[3];
    }
  }
  _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
      lm_vf t = e[i][h] + o[i][h], bh, old;
      if (k < kc) { /* an odd block's last k */
        memcpy(&bh, b + LM_NR * k + h * LM_VL, LM_VBYTES);
        t += a[LM_MR * k + i] * bh;
      }
      if (!first) {
        memcpy(&old, c + i * ldc + h * LM_VL, LM_VBYTES);
        t += old;
      }
      memcpy(c + i * ldc + h * LM_VL, &t, LM_VBYTES);
    }
  }
}
#endif
/* A panel (k-major, LM_MR wide) of which only the first `rows` are rows of A. */
static inline void lm_micro_edge(int64_t rows, int64_t kc, const float* restrict a, const float* restrict b,
                                 float* restrict c, int64_t ldc, int first, const float* pf) {
#if !defined(__AVX512F__) && !defined(LM_NO_MICRO2)
  if (rows <= 2) {
    lm_micro2(kc, a, b, c, ldc, first);
    return;
  }
#endif
  if (rows <= 4) lm_micro4(kc, a, 0, b, c, ldc, first, pf);
#if LM_MR > 8
  else if (rows <= 8) lm_micro8(kc, a, 0, b, c, ldc, first, pf);
#endif
  else lm_micro(kc, a, 0, b, c, ldc, first, pf);
}
/* c[0, 0:NR] = (first ? 0 : c) + one row of A (element k at a[k * step]) times b: a panel holding a single row
   (a decode step's batch of one). The full kernel would multiply LM_MR - 1 rows of zeros, LM_MR times the FMAs
   and broadcasts per weight loaded; with one row a GEMV is bound by reading B. Even and odd k accumulate apart
   so two FMA chains are in flight per half. */
static inline void lm_micro_row(int64_t kc, const float* restrict a, int64_t step, const float* restrict b,
                                float* restrict c, int first) {
  lm_vf e0 = {0}, e1 = {0}, o0 = {0}, o1 = {0};
  int64_t k = 0;
  for (; k + 2 <= kc; k += 2) {
    lm_vf b0, b1, b2, b3;
    memcpy(&b0, b + LM_NR * k, LM_VBYTES);
    memcpy(&b1, b + LM_NR * k + LM_VL, LM_VBYTES);
    memcpy(&b2, b + LM_NR * (k + 1), LM_VBYTES);
    memcpy(&b3, b + LM_NR * (k + 1) + LM_VL, LM_VBYTES);
    const float a0 = a[k * step], a1 = a[(k + 1) * step];
    e0 += a0 * b0;
    e1 += a0 * b1;
    o0 += a1 * b2;
    o1 += a1 * b3;
  }
  if (k < kc) {
    lm_vf b0, b1;
    memcpy(&b0, b + LM_NR * k, LM_VBYTES);
    memcpy(&b1, b + LM_NR * k + LM_VL, LM_VBYTES);
    e0 += a[k * step] * b0;
    e1 += a[k * step] * b1;
  }
  e0 += o0;
  e1 += o1;
  if (!first) {
    lm_vf old0, old1;
    memcpy(&old0, c, LM_VBYTES);
    memcpy(&old1, c + LM_VL, LM_VBYTES);
    e0 += old0;
    e1 += old1;
  }
  memcpy(c, &e0, LM_VBYTES);
  memcpy(c + LM_VL, &e1, LM_VBYTES);
}
#pragma GCC pop_options
"""


def _reads_any(operand: ir.Value, axes: tuple[int, ...]) -> bool:
    names = index_vars(operand)
    return any(f"_i{j}" in names for j in axes)


def _columns(position: str, shape, axes: tuple[int, ...]) -> list[str]:
    """The N indices of the tile's column at `position`. One N axis is the column itself: written so, not through
    decode's 32-bit wrap, which hides from the C compiler that a row's reads and stores are contiguous (it built
    each vector from scalar loads, or left the loop scalar: a GELU epilogue called exp2f per element, and a
    128x384x1536 linear with GELU took 3.7 ms on one Zen 4 thread, 1.5 ms with the column written so)."""
    if len(axes) == 1:
        return [f"const int64_t _i{axes[0]} = {position}; (void)_i{axes[0]};"]
    return decode(position, shape, axes)


def _float_kc() -> str:
    """The float GEMM's contraction block. Where every row of A fits one panel (a decode step's few rows), the C
    tile multiplies each B panel once, so no block of B is reused from L1 and the panels are read in one
    contraction block: each task's B then is one sequential stream, not LM_NCP interleaved ones. One thread of a
    Zen 3 EPYC read the 125M bench Llama's 400 MB of one-row GEMV panels at 15.2 GB/s so, 13.9 in blocks of 256
    (a plain sum of the same bytes: 16.1). Where M is a constant the C compiler folds the test away."""
    blocked = "lm_kblocks ? (lm_K + lm_kblocks - 1) / lm_kblocks : 1"
    return f"  const int64_t lm_kc = lm_mp == 1 && lm_K > 0 ? lm_K : ({blocked});  /* one panel: one block */"


def _sizes(kernel: ir.LoopKernel, gemm: GemmPlan, integer: bool = False) -> list[str]:
    """The extents; panels span lm_K floats, or lm_KP int16 values for the integer GEMM (K rounded up to a pair)."""
    shape, depth = kernel.shape, "lm_KP" if integer else "lm_K"
    return [
        f"  const int64_t lm_M = {extent(shape, gemm.m)}, lm_N = {extent(shape, gemm.n)};",
        f"  const int64_t lm_NB = {extent(shape, gemm.batch)}, lm_K = {gemm.contract.extent.render_c()};",
        "  const int64_t lm_KP = (lm_K + 1) / 2 * 2; (void)lm_KP;",
        "  const int64_t lm_mp = (lm_M + LM_MR - 1) / LM_MR, lm_np = (lm_N + LM_NR - 1) / LM_NR;",
        f"  const int64_t lm_asz = lm_mp * LM_MR * {depth}, lm_bsz = lm_np * LM_NR * {depth};  /* per batch */",
        "  (void)lm_M; (void)lm_N; (void)lm_NB; (void)lm_mp; (void)lm_np; (void)lm_asz; (void)lm_bsz;",
    ]


def prepare_source(kernel: ir.LoopKernel, gemm: GemmPlan, emitter_cls, head: list[str], ptrs, packed: str):
    """The body lines of the function that fills `packed` with B's panels once, after the weights are bound."""
    c = gemm.contract
    lines = head + ["  int lm_err = 0;"] + _sizes(kernel, gemm)
    lines += [f"  float* lm_pb = {ptrs[packed]};", "  #pragma omp parallel reduction(|:lm_err)", "  {"]
    lines += pack_phase(emitter_cls, ptrs, c.b, c.var, kernel.shape, (), gemm.n, "b")
    return lines + ["  }", "  return lm_err;", "}"]


def kernel_source(
    kernel: ir.LoopKernel,
    gemm: GemmPlan,
    emitter_cls,
    head: list[str],
    ptrs,
    out_store,
    packed: str | None = None,
    integer: bool = False,
) -> list[str]:
    """The body lines of a GEMM kernel (after `head`, the pointer and symbol declarations). With `packed`,
    B's panels are read from that buffer (filled by the prepare function) instead of packed here. With
    `integer`, an integer GEMM (compiler/cpu/int_gemm.py): int16 panels in pairs, an int32 tile, both operands
    packed."""
    c, shape = gemm.contract, kernel.shape
    ctype, acc, depth = ("int16_t", "int32_t", "lm_KP") if integer else ("float", "float", "lm_K")
    a_batched, b_batched = _reads_any(c.a, gemm.batch), _reads_any(c.b, gemm.batch)
    direct = None if integer else direct_rows(c.a, c.var, gemm.m, shape)
    a_floats = "LM_MR * lm_K" if direct else "lm_asz"  # in place: only the edge panel is copied
    lines = head + ["  int lm_err = 0;"] + _sizes(kernel, gemm, integer)
    lines += [
        "  if (lm_M <= 0 || lm_N <= 0 || lm_NB <= 0) return 0;",
        f"  const int64_t lm_nba = {'lm_NB' if a_batched else '1'};",
    ]
    if packed is None:
        total = f"lm_nba * {a_floats} + lm_nbb * lm_bsz"
        lines += [
            f"  const int64_t lm_nbb = {'lm_NB' if b_batched else '1'};",
            f"  {ctype}* lm_pa = ({ctype}*)lm_gemm_pack_buffer({f'({total}) / 2' if integer else total} + 1);",
            "  if (!lm_pa) return 1;",
            f"  {ctype}* lm_pb = lm_pa + lm_nba * {a_floats};",
        ]
    else:
        lines += [
            f"  float* lm_pa = lm_gemm_pack_buffer(lm_nba * {a_floats} + 1);",
            "  if (!lm_pa) return 1;",
            f"  const float* lm_pb = {ptrs[packed]};",
        ]
    lines += [
        "  int64_t lm_mt, lm_nt;",
        "  lm_gemm_chunks(lm_NB, lm_mp, lm_np, &lm_mt, &lm_nt);",
        # Rows and columns split evenly over the chunks (whole panels), so no task is a small remainder.
        "  const int64_t lm_mcp = (lm_mp + lm_mt - 1) / lm_mt, lm_ncp = (lm_np + lm_nt - 1) / lm_nt;",
        "  const int64_t lm_tasks = lm_NB * lm_mt * lm_nt;",
        # Contraction blocks of equal depth (384 is two of 192, not 256 and a short 128).
        "  const int64_t lm_kblocks = (lm_K + LM_KC - 1) / LM_KC;",
        "  const int64_t lm_kc = lm_kblocks ? ((lm_K + lm_kblocks - 1) / lm_kblocks + 1) / 2 * 2 : 2;  /* pairs */"
        if integer
        else _float_kc(),
        "  #pragma omp parallel reduction(|:lm_err) if (lm_tasks > 1 && lm_NB * lm_M * lm_N * (lm_K + 1) >= 65536)",
        "  {",
        f"    {acc} lm_ct[LM_MCH * LM_NCH] __attribute__((aligned(64)));",
    ]
    a_batch = gemm.batch if a_batched else ()
    pack_a = pack_phase(
        emitter_cls, ptrs, c.a, c.var, shape, a_batch, gemm.m, "a", edge_only=direct is not None, pairs=integer
    )
    if direct is not None:
        # An edge panel of one row is read in place by lm_micro_row, so it is not copied, and a decode step's
        # GEMV skips the copy's loop and its barrier (every thread takes the same branch; the C compiler folds
        # the test where M is a constant).
        pack_a = ["    if (lm_M % LM_MR != 1) {"] + ["  " + s for s in pack_a] + ["    }"]
    lines += pack_a
    if packed is None:
        b_batch = gemm.batch if b_batched else ()
        lines += pack_phase(emitter_cls, ptrs, c.b, c.var, shape, b_batch, gemm.n, "b", pairs=integer)
    lines += [
        "    #pragma omp for schedule(dynamic)",
        "    for (int64_t lm_t = 0; lm_t < lm_tasks; lm_t++) {",
        "      const int64_t lm_bt = lm_t / (lm_mt * lm_nt);",
        "      const int64_t lm_p0 = (lm_t / lm_nt) % lm_mt * lm_mcp, lm_q0 = lm_t % lm_nt * lm_ncp;",
        "      if (lm_p0 >= lm_mp || lm_q0 >= lm_np) continue;",
    ]
    lines += ["      " + s for s in decode("lm_bt", shape, gemm.batch)]
    lines += [
        "      const int64_t lm_mpl = lm_mp - lm_p0 < lm_mcp ? lm_mp - lm_p0 : lm_mcp;",
        "      const int64_t lm_npl = lm_np - lm_q0 < lm_ncp ? lm_np - lm_q0 : lm_ncp;",
        "      const int64_t lm_m0 = lm_p0 * LM_MR, lm_n0 = lm_q0 * LM_NR;",
        "      const int64_t lm_mlen = lm_M - lm_m0 < lm_mpl * LM_MR ? lm_M - lm_m0 : lm_mpl * LM_MR;",
        "      const int64_t lm_nlen = lm_N - lm_n0 < lm_npl * LM_NR ? lm_N - lm_n0 : lm_npl * LM_NR;",
        f"      const {ctype}* lm_bb = lm_pb + {'lm_bt * lm_bsz + ' if b_batched else ''}lm_q0 * LM_NR * {depth};",
        "      for (int64_t lm_i = 0; lm_i < (lm_K > 0 ? 0 : lm_mpl * LM_MR); lm_i++)  /* no block to store */",
        "        memset(lm_ct + lm_i * LM_NCH, 0, sizeof(lm_ct[0]) * lm_npl * LM_NR);",
    ]
    if direct is not None:
        stride = direct.row_stride.render_c()
        lines += [
            f"      const int64_t lm_lda = {stride};",
            f"      const float* lm_arow = {ptrs[direct.buffer]} + ({direct.offset.render_c()}) + lm_m0 * lm_lda;",
            f"      const float* lm_aedge = lm_pa + {'lm_bt * LM_MR * lm_K' if a_batched else '0'};",
        ]
    else:
        lines += [
            f"      const {ctype}* lm_ab = lm_pa + {'lm_bt * lm_asz + ' if a_batched else ''}lm_p0 * LM_MR * {depth};"
        ]
    lines += [
        "      for (int64_t lm_k0 = 0; lm_k0 < lm_K; lm_k0 += lm_kc) {",
        "        const int64_t lm_kl = lm_K - lm_k0 < lm_kc ? lm_K - lm_k0 : lm_kc;",
        # A B panel's block (kl x NR) stays in L1 while the chunk's A rows stream past it from L2.
        "        for (int64_t lm_q = 0; lm_q < lm_npl; lm_q++) {",
        f"          const {ctype}* lm_bq = lm_bb + (lm_q * LM_NR * {depth} + lm_k0 * LM_NR);",
    ]
    if not integer:
        # The block this task multiplies next (the next panel's, else the next contraction block's first panel's),
        # fetched while the first row panel multiplies this one; the other panels re-touch this block.
        lines += [
            "          const float* lm_bn = lm_q + 1 < lm_npl ? lm_bq + LM_NR * lm_K",
            "                             : lm_k0 + lm_kc < lm_K ? lm_bb + (lm_k0 + lm_kc) * LM_NR : lm_bq;",
        ]
    lines += [
        "          for (int64_t lm_p = 0; lm_p < lm_mpl; lm_p++) {",
        f"            {acc}* lm_cq = lm_ct + lm_p * LM_MR * LM_NCH + lm_q * LM_NR;",
    ]
    if not integer:
        lines += ["            const float* lm_pf = lm_p == 0 ? lm_bn : lm_bq;"]
    if direct is not None:
        lines += [
            "            if (lm_m0 + (lm_p + 1) * LM_MR <= lm_M)",
            "              lm_micro_rows(lm_kl, lm_arow + lm_p * LM_MR * lm_lda + lm_k0, lm_lda, lm_bq, lm_cq,",
            "                            LM_NCH, lm_k0 == 0, lm_pf);",
            "            else if (lm_M - lm_m0 - lm_p * LM_MR == 1)",
            "              lm_micro_row(lm_kl, lm_arow + lm_p * LM_MR * lm_lda + lm_k0, 1, lm_bq, lm_cq, lm_k0 == 0);",
            "            else",
            "              lm_micro_edge(lm_M - lm_m0 - lm_p * LM_MR, lm_kl, lm_aedge + lm_k0 * LM_MR, lm_bq, lm_cq,",
            "                            LM_NCH, lm_k0 == 0, lm_pf);",
        ]
    elif integer:  # pairs of k: a block's (kl + 1) / 2, an odd K's last one padded with 0
        lines += [
            "            lm_imicro((lm_kl + 1) / 2, lm_ab + (lm_p * LM_MR * lm_KP + lm_k0 * LM_MR), lm_bq, lm_cq,",
            "                      LM_NCH, lm_k0 == 0);",
        ]
    else:
        lines += [
            "            if (lm_M - lm_m0 - lm_p * LM_MR == 1)",
            "              lm_micro_row(lm_kl, lm_ab + (lm_p * LM_MR * lm_K + lm_k0 * LM_MR), LM_MR, lm_bq, lm_cq,",
            "                           lm_k0 == 0);",
            "            else",
            "              lm_micro_edge(lm_M - lm_m0 - lm_p * LM_MR, lm_kl,",
            "                            lm_ab + (lm_p * LM_MR * lm_K + lm_k0 * LM_MR), lm_bq, lm_cq, LM_NCH,",
            "                            lm_k0 == 0, lm_pf);",
        ]
    lines += ["          }", "        }", "      }"]
    # Epilogue: the rest of the body, per output element of the tile; a gathered sum in it (a multi-LoRA
    # product added to the projection) is computed for the tile's row first (compiler/cpu/row_sums.py).
    row = emitter_cls(ptrs)
    row.indent = 2
    n_axes = {f"_i{j}": shape[j] for j in gemm.n}
    columns = _columns("lm_n0 + _tj", shape, gemm.n)
    epilogue = row_sums.swap_sums(row, gemm.epilogue, n_axes, columns, "lm_nlen", "LM_NCH", "lm_j")
    e = emitter_cls(ptrs)
    e.indent = 5
    e.counter = row.counter  # fresh names must not shadow the row's
    value = e.emit(epilogue)
    lines += ["      for (int64_t lm_i = 0; lm_i < lm_mlen; lm_i++) {"]
    lines += ["        " + s for s in decode("lm_m0 + lm_i", shape, gemm.m)]
    lines += ["    " + s for s in row.lines]
    lines += ["        for (int64_t lm_j = 0; lm_j < lm_nlen; lm_j++) {"]
    lines += ["          " + s for s in _columns("lm_n0 + lm_j", shape, gemm.n)]
    lines += [f"          const {acc} lm_acc = lm_ct[lm_i * LM_NCH + lm_j];"]
    lines += ["    " + s for s in e.lines]
    lines += ["          " + out_store(value), "        }", "      }", "    }", "  }", "  return lm_err;", "}"]
    return lines
