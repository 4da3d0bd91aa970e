"""The launch plan: how each kernel of a program maps onto a CUDA grid, as data the runtimes read.

Every launch is a one-dimensional grid of `block`-thread blocks; the block count is a symbolic expression the
runtime evaluates at the bound dims (a launch of zero blocks is skipped). Each kernel takes its buffers as
pointers (the output first, then what it reads in order), then the dims block `D` (the symbols' values, in the
program's sorted symbol order) and `lm_status` (set to 1 when a gather or scatter index is out of range).

Shapes, by what the kernel computes:
- "thread": one thread per output element (element-wise and fused kernels, small reductions).
- "warp": a warp per output element, its reductions split over the warp's lanes (a reduction over a long axis).
- "row": a block per row of the output (all axes but the last): the row's statistics (a softmax's max and sum,
  a layer norm's mean and variance: reductions that do not read the last axis) split over the block, then the
  block's threads stride over the row's elements.
- "gemv": split-K GEMV (compiler/gpu/gemv.py): a block per GEMV_ROWS outputs, the contraction split over its
  threads in 16-byte weight loads; a decode step's linear layers (compiler/analysis/gemv_plan.py). Over several rows
  sharing the weight (`row_group`), a block per GEMV_ROWS outputs of the N axis, for every row.
- "gemm": a tiled GEMM with its epilogue (compiler/gpu/gemm.py); "attention": a block per query row.
- "attention_split" then "combine": flash decoding (compiler/analysis/attention_plan.py's `splits`), a block per query
  row and block of keys writing partial results to the kernel's partials buffer, then a block per row combining them.
  On CUDA the two are one "flash_decode" launch (compiler/cuda/arrivals.py): the last block of a row to finish
  does the combine; it writes the output, the partials and the row's arrival counter (`writes` = 3).
- "copy" then "scatter": a scatter kernel's destination copied element-wise, then one thread per scattered value;
  a scatter into its donated input (compiler/kernels/in_place.py: its output buffer is the one it reads whole) has
  no copy.
- "scatters": consecutive in-place scatters of one source shape in one launch, a thread per source position
  (compiler/gpu/scatter_batch.py, which compiler/cuda/program.py applies to the plan); `writes` outputs first.
- "gemvs": consecutive GEMVs in one launch, in parts of one grid (independent ones side by side, one that reads
  another's outputs at its own positions after it in its blocks: compiler/gpu/gemv_batch.py, which
  compiler/cuda/program.py applies to the plan); `writes` outputs first.
- "warps": consecutive warp kernels over the same elements in one launch, each warp running them in turn (a
  LayerNorm's mean, then its variance: compiler/gpu/warp_batch.py); `writes` outputs first.
- "threads": consecutive independent thread kernels over the same elements in one launch, each thread computing
  them in turn (a prefill's copies into the caches' layout: compiler/gpu/thread_batch.py); `writes` outputs first.
- "cublas": no kernel of ours but a library call (compiler/cuda/library_gemm.py): the GEMM step `call`, issued by
  the runtime on its stream; its "grid" is the output's element count (no call where it is 0) and block 0.
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.analysis import attention_plan, gemv_plan
from luminal.compiler.analysis.gemm_plan import plan
from luminal.compiler.kernels import hoist, ir
from luminal.compiler.storage.run_plan import Launch  # the artifact's record of a launch
from luminal.symbolic import Expr, as_expr
from luminal.view import dims_product

THREADS = 256  # threads per block: 8 warps, enough to hide latency, few enough to keep registers per thread high
WARPS = THREADS // 32
ATTENTION_THREADS = 128
GEMV_ROWS = 4  # outputs per GEMV block: 4 independent 16-byte loads in flight per thread and chunk
GEMM_TILE = 64  # a block's output tile is 64 x 64 (compiler/gpu/gemm.py)
# A thread per element sums up to this many steps on its own; longer reductions are split over a warp.
THREAD_STEPS = 64
MAX_STAGED_BYTES = 32768  # a GEMV's staged vector (8192 floats), within the 48 KiB of static shared memory
# Rows of a batched GEMV's output (a decode step over several sequences) a block computes per pass over its
# weight rows: each 16-byte weight load serves this many rows' sums.
GEMV_ROW_GROUP = 4


def _blocks(count: Expr, per_block: int) -> Expr:
    return (as_expr(count) + (per_block - 1)) // per_block


def has_cooperative_reduction(v: ir.Value) -> bool:
    """Whether `v` reaches a reduction through element-wise ops, guards and gathers' indices: one a warp shares."""
    if isinstance(v, (ir.Reduce, ir.Contract)):
        return True
    return any(has_cooperative_reduction(c) for c in ir.children(v) if not isinstance(c, ir.Attend))


def row_statistics(k: ir.LoopKernel) -> bool:
    """Whether the kernel's body reads reductions that do not depend on its last axis (computed once per row)."""
    if not k.shape:
        return False
    return bool(hoist.invariant_reductions(k.body, f"_i{len(k.shape) - 1}", k.shape[-1]))


def staged(k: ir.LoopKernel, gemv: gemv_plan.GemvPlan) -> bool:
    """Whether the GEMV block computes the plan's vector once into shared memory (compiler/gpu/gemv.py): when
    there is one, its K values fit MAX_STAGED_BYTES, and the N axis's length is a multiple of GEMV_ROWS (a
    block's outputs share their other indices, so one vector serves them all)."""
    extent, last = gemv.reduction.extent, k.shape[-1]
    if gemv.vector is None or not extent.is_const or _staged_row_bytes(gemv) > MAX_STAGED_BYTES:
        return False
    return last.is_const and last.value % GEMV_ROWS == 0


def _staged_row_bytes(gemv: gemv_plan.GemvPlan) -> int:
    """Shared memory one row's staged vector takes: K values of its compute type (float, or double for float64)."""
    return gemv.reduction.extent.value * (8 if gemv.vector.dtype == dt.float64 else 4)


def row_group(k: ir.LoopKernel, gemv: gemv_plan.GemvPlan) -> int:
    """How many of the output's rows (its leading axes) a GEMV block computes per pass over its weight rows, or 0
    where a block computes GEMV_ROWS consecutive outputs of one row. Rows share a block when there may be more
    than one, the weight row does not depend on them (a linear layer's weight, not a per-sequence cache) and the
    N axis is a multiple of GEMV_ROWS: then the grid covers N alone and every weight element is read from memory
    once per run, not once per row. A staged vector is staged for every row of the group, within
    MAX_STAGED_BYTES."""
    leading, last = k.shape[:-1], k.shape[-1]
    rows = dims_product(leading) if leading else as_expr(1)
    if rows.hi <= 1 or not last.is_const or last.value % GEMV_ROWS:
        return 0
    if {f"_i{j}" for j in range(len(leading))} & gemv.stream.index.symbols():
        return 0
    group = min(GEMV_ROW_GROUP, rows.hi)  # a symbol's rows: at most its maximum
    if staged(k, gemv):
        group = max(1, min(group, MAX_STAGED_BYTES // _staged_row_bytes(gemv)))
    return group


def loop_shape(k: ir.LoopKernel) -> str:
    """How a loop kernel is launched: "gemv", "gemm", "attention", "row", "warp" or "thread"."""
    return ir.kept(k, "loop_shape", _loop_shape)


def _loop_shape(k: ir.LoopKernel) -> str:
    gemv = gemv_plan.plan(k)
    if gemv is not None and (not gemv.statistics or staged(k, gemv)):  # statistics only once per block
        return "gemv"
    if plan(k) is not None:
        return "gemm"
    if isinstance(k.body, ir.Attend):
        return "attention"
    if row_statistics(k):
        return "row"
    steps = ir.steps_per_element(k.body)
    long = not steps.is_const or int(steps.lo) > THREAD_STEPS
    return "warp" if long and has_cooperative_reduction(k.body) else "thread"


def launches(k: ir.Kernel, reads: list[str]) -> list[Launch]:
    """The launches that run kernel `k`, which reads `reads` (in order)."""
    buffers = (k.out, *[b for b in reads if b != k.out])
    numel = dims_product(k.shape)
    if isinstance(k, ir.ScatterKernel):
        count = dims_product(k.src_shape)
        scatter = Launch(f"{k.name}_scatter", "scatter", _blocks(count, THREADS), THREADS, buffers)
        if k.out in reads:  # in place: the destination already holds what the copy would write
            return [scatter]
        return [Launch(f"{k.name}_copy", "copy", _blocks(numel, THREADS), THREADS, buffers), scatter]
    shape = loop_shape(k)
    if shape == "gemm":
        gemm = plan(k)
        m, n, nb = (dims_product([k.shape[j] for j in axes]) for axes in (gemm.m, gemm.n, gemm.batch))
        grid = _blocks(m, GEMM_TILE) * _blocks(n, GEMM_TILE) * nb
        return [Launch(k.name, shape, grid, THREADS, buffers)]
    if shape == "gemv":
        batched = row_group(k, gemv_plan.plan(k)) > 0  # a block per GEMV_ROWS outputs of every row
        grid = as_expr(k.shape[-1].value // GEMV_ROWS) if batched else _blocks(numel, GEMV_ROWS)
        return [Launch(k.name, shape, grid, THREADS, buffers)]
    if shape == "attention" and attention_plan.splits(k) is not None:
        rows, scratch = dims_product(k.shape[:-1]), attention_plan.partials(k)
        split = Launch(f"{k.name}_split", "attention_split", rows * attention_plan.splits(k), ATTENTION_THREADS,
                       (scratch, *buffers[1:]))  # fmt: skip
        return [split, Launch(f"{k.name}_combine", "combine", rows, ATTENTION_THREADS, (k.out, scratch))]
    if shape == "attention":
        return [Launch(k.name, shape, dims_product(k.shape[:-1]), ATTENTION_THREADS, buffers)]
    if shape == "row":
        return [Launch(k.name, shape, dims_product(k.shape[:-1]), THREADS, buffers)]
    per_block = WARPS if shape == "warp" else THREADS
    return [Launch(k.name, shape, _blocks(numel, per_block), THREADS, buffers)]
