"""CUDA for a GEMV kernel (compiler/analysis/gemv_plan.py): split-K, several outputs per block, 16-byte weight loads.

A block of THREADS threads computes GEMV_ROWS consecutive outputs (along the N axis, so they share the input
vector, which stays in L1). The contraction is split over all the block's threads in chunks of `width`
elements: per chunk and output, a thread reads the weight row's `width` elements with one 16-byte load
(lm_load16, prelude.py) and evaluates the sum's body at each of them, the stream operand standing for the
loaded element, everything else (the input vector, a dequantising scale) as the generic emitter writes it. The
GEMV_ROWS loads of a chunk are independent, so each thread keeps several in flight. Partial sums are float32
(double for a float64 sum); all of a pass's sums are folded at once (lm_block_fold_many, prelude.py: lanes swap
halves of their sums, then one word per warp and sum in shared memory): the same order every run, no atomics.
Thread t then finishes sum t: the epilogue (bias, activation, residual, casts) and the store.
A block past the last output computes the last one again (all threads must reach the folds) and stores nothing.
Over several rows that share the weight (a decode step over many sequences: launch.row_group), a block takes
GEMV_ROWS outputs of the N axis for every row, in passes of a group of rows: each weight load serves the whole
group, so the weights are read from memory once per run however many rows there are, and the grid does not
depend on them. A row past the last in a pass is skipped by the whole block (its work, its folds, its store).
Where the sum's body is the stream times a factor that does not read the N axis (the input vector, or a fused
producer of it such as the MLP's silu(gate) * up), that factor is computed once per block into shared memory
before the loop (for each row of a group): when the N axis's length is a multiple of GEMV_ROWS (a block's
outputs share their other indices) and K values fit MAX_STAGED_BYTES (launch.staged). A norm fused into that
factor (norm_prologue.py) has its row statistics computed first, split over the block and folded as a row
kernel folds them.
"""

from __future__ import annotations

from dataclasses import replace

from luminal.compiler.analysis import gemv_plan
from luminal.compiler.analysis.gemm_operands import decode
from luminal.compiler.analysis.gemv_plan import GemvPlan
from luminal.compiler.gpu import gemv_batch
from luminal.compiler.gpu.emitter import CudaEmitter
from luminal.compiler.gpu.kernels import FOOT, head, pointers
from luminal.compiler.gpu.launch import GEMV_ROWS, Launch, row_group, staged
from luminal.compiler.kernels import hoist, ir
from luminal.compiler.renderer.dialects import COMPUTE, CUDA
from luminal.symbolic import Expr, as_expr, var
from luminal.view import ShapeTracker, dims_product

LOADED = "lm_wv"  # the chunk's weight elements, a local array standing for the stream operand
STAGED = "lm_x"  # the block's input vector in shared memory


def _stage(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, flat: str, at: str) -> list[str]:
    """The vector at every step of the contraction, at output `flat`'s indices, into shared memory from `at` on.
    Its row statistics (a fused norm's sum of squares) are computed first, split over the block and folded, as
    a row kernel computes them (compiler/gpu/kernels.py); every thread reaches those folds."""
    r, extent = gemv.reduction.var, gemv.reduction.extent.value
    lines = ["  {", f"    const int64_t lm_flat = {flat};"]
    lines += ["    " + s for s in decode("lm_flat", k.shape, tuple(range(len(k.shape))))]
    lines += [f"    const int64_t lm_lane = {CUDA.thread_index}, lm_group = {CUDA.block_size}; (void)lm_lane;"]
    outer = CudaEmitter(pointers(launch), "block")
    outer.indent = 2
    vector = outer.hoisted(gemv.vector, r, gemv.reduction.extent)
    e = CudaEmitter(pointers(launch))
    e.counter, e.indent = outer.counter, 3  # fresh names must not shadow the statistics' names
    value = e.emit(vector)
    lines += outer.lines
    lines += [f"    for (int64_t {r} = {CUDA.thread_index}; {r} < {extent}; {r} += {launch.block}) {{"]
    return lines + e.lines + [f"      {STAGED}[{at} + {r}] = {value};", "    }", "  }"]


def _load_weights(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, first: str, numel: str) -> list[str]:
    """A chunk's weight elements for each of the block's GEMV_ROWS outputs along N, one 16-byte load each,
    at the indices of the block's first row (the weight does not depend on the others)."""
    r, stream, width = gemv.reduction.var, gemv.stream, gemv.width
    ptr = pointers(launch)[stream.buffer]
    at = stream.index.substitute({r: var("lm_k0")}).render_c()
    lines = []
    for j in range(GEMV_ROWS):
        lines += [f"    {CUDA.storage[stream.dtype]} {LOADED}{j}[{width}];", "    {"]
        lines += [f"      const int64_t lm_flat = {first} + {j} < {numel} ? {first} + {j} : {numel} - 1;"]
        lines += ["      " + s for s in decode("lm_flat", k.shape, tuple(range(len(k.shape))))]
        lines += [f"      lm_load16(&{ptr}[{at}], {LOADED}{j});", "    }"]
    return lines


def _row(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, g: int, j: int, first: str, numel: str) -> list[str]:
    """Output (g, j)'s share of a chunk: its indices, the body at each element of the chunk, the sum."""
    r, width, stream = gemv.reduction.var, gemv.width, gemv.stream
    axes = tuple(range(len(k.shape)))
    lines = ["    {", f"      const int64_t lm_flat = {first} + {j} < {numel} ? {first} + {j} : {numel} - 1;"]
    lines += ["      " + s for s in decode("lm_flat", k.shape, axes)]
    body = gemv.reduction.body
    if staged(k, gemv):
        at = f"{STAGED}[{g * gemv.reduction.extent.value} + {r}]"
        body = _substitute_load(body, gemv.vector, hoist.Hoisted(at, gemv.vector.dtype))
    if width > 1:
        body = _substitute_load(body, stream, ir.Load(f"{LOADED}{j}", var("lm_e"), stream.dtype))
        lines += [
            "      #pragma unroll",
            f"      for (int lm_e = 0; lm_e < {width}; lm_e++) {{",
            f"        const int64_t {r} = lm_k0 + lm_e;",
        ]
    else:
        lines += ["      {", f"        const int64_t {r} = lm_k0;"]
    e = CudaEmitter({**pointers(launch), **{f"{LOADED}{i}": f"{LOADED}{i}" for i in range(GEMV_ROWS)}})
    e.indent = 4
    value = e.emit(body)
    return lines + e.lines + [f"        lm_acc{g}_{j} += {value};", "      }", "    }"]


def _substitute_load(v: ir.Value, old: ir.Value, new: ir.Value) -> ir.Value:
    if v == old:
        return new
    if isinstance(v, ir.Apply):
        return replace(v, args=tuple(_substitute_load(a, old, new) for a in v.args))
    if isinstance(v, ir.Guard):
        return replace(v, value=_substitute_load(v.value, old, new))
    return v


def kernel_source(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, buffers, symbols) -> list[str]:
    lines = head(launch, buffers, symbols)
    if staged(k, gemv):
        lines += [_staged_array(COMPUTE[gemv.vector.dtype], _staged_size(k, gemv))]
    return lines + _blocks(launch, k, gemv, buffers, CUDA.block_index) + FOOT


def batch_source(launch: Launch, parts: list[list[ir.LoopKernel]], grids: list[Expr], buffers, symbols) -> list[str]:
    """GEMVs in one launch (compiler/gpu/gemv_batch.py): the members of part p take the blocks from the sum of
    the grids before it (at the live dims), and in each of those blocks run one after the other as alone, with
    that block index, a barrier between them (a member may read what the one before stored at its own outputs).
    Whether a block runs a part is the same for all of its threads, so each member's folds see the whole block."""
    lines = head(launch, buffers, symbols)
    members = [(k, gemv_plan.plan(k)) for part in parts for k in part]
    sizes = [_staged_size(k, gemv) for k, gemv in members if staged(k, gemv)]
    if sizes:
        (kind,) = {gemv_batch.staged_type(k) for k, _ in members} - {None}  # one type: gemv_batch merges no other
        lines += [_staged_array(kind, max(sizes))]
    lines += [f"  const int64_t lm_b = {CUDA.block_index};"]
    first = as_expr(0)
    for p, (part, grid) in enumerate(zip(parts, grids)):
        end = first + grid
        lines += [f"  {'else if' if p else 'if'} (lm_b < {end.render_c()}) {{"]
        lines += [f"    const int64_t lm_block = lm_b - ({first.render_c()});"]
        for j, k in enumerate(part):
            stage = not (j and gemv_batch.shares_staging(part[j - 1], k))
            if j:
                lines += [f"    {CUDA.barrier}"]
            done = _blocks(launch, k, gemv_plan.plan(k), buffers, "lm_block", stage)
            lines += ["    {"] + ["    " + line for line in done] + ["    }"]
        lines += ["  }"]
        first = end
    return lines + FOOT


def _staged_size(k: ir.LoopKernel, gemv: GemvPlan) -> int:
    """Values of the staged vector: K for each row of a pass."""
    return max(row_group(k, gemv), 1) * gemv.reduction.extent.value


def _staged_array(kind: str, size: int) -> str:
    return f"  __shared__ {kind} {STAGED}[{size}];"


def _blocks(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, buffers, block: str, stage: bool = True) -> list[str]:
    """What block `block` of the kernel's grid computes: its GEMV_ROWS outputs, of every row of a row group.
    `stage` False: the block's one pass finds its vector staged already (gemv_batch.shares_staging)."""
    tile = f"{block} * {GEMV_ROWS}"
    group = row_group(k, gemv)
    if not group:  # GEMV_ROWS consecutive outputs, one pass
        return _pass(launch, k, gemv, buffers, [tile], ["true"], stage)
    n = k.shape[-1].value
    lines = [f"  const int64_t lm_rows = {dims_product(k.shape[:-1]).render_c()};"]
    lines += [f"  for (int64_t lm_m0 = 0; lm_m0 < lm_rows; lm_m0 += {group}) {{"]
    # A row past the last is computed as the last (its indices stay in range) but skipped where that is uniform.
    firsts = [f"(lm_m0 + {g} < lm_rows ? lm_m0 + {g} : lm_rows - 1) * {n} + {tile}" for g in range(group)]
    lives = [f"lm_m0 + {g} < lm_rows" for g in range(group)]
    passed = _pass(launch, k, gemv, buffers, firsts, lives)
    return lines + ["  " + line for line in passed] + [f"    {CUDA.barrier}", "  }"]


def _pass(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, buffers, firsts, lives, stage: bool = True) -> list[str]:
    """One pass over the block's weight rows for the rows whose first outputs are `firsts` (flat positions);
    `lives`: whether each row exists, the same for every thread, so a dead row's work and folds are skipped;
    `stage` False: the vector is in shared memory already."""
    numel = dims_product(k.shape).render_c()
    chunks = gemv.reduction.extent.render_c() if gemv.width == 1 else f"{gemv.reduction.extent.value // gemv.width}"
    slots = [(g, j) for g in range(len(firsts)) for j in range(GEMV_ROWS)]
    lines = [f"  const int64_t lm_first{g} = {first};" for g, first in enumerate(firsts)]
    if staged(k, gemv) and stage:
        extent = gemv.reduction.extent.value
        for g in range(len(firsts)):
            lines += [f"  if ({lives[g]})"] + _stage(launch, k, gemv, f"lm_first{g}", str(g * extent))
        lines += [f"  {CUDA.barrier}"]
    lines += [f"  {COMPUTE[gemv.reduction.dtype]} lm_acc{g}_{j} = 0;" for g, j in slots]
    lines += [f"  for (int64_t lm_c = {CUDA.thread_index}; lm_c < {chunks}; lm_c += {launch.block}) {{"]
    lines += [f"    const int64_t lm_k0 = lm_c * {gemv.width};"]
    if gemv.width > 1:
        lines += _load_weights(launch, k, gemv, "lm_first0", numel)
    for g in range(len(firsts)):
        lines += [f"    if ({lives[g]}) {{"]
        for j in range(GEMV_ROWS):
            lines += ["  " + line for line in _row(launch, k, gemv, g, j, f"lm_first{g}", numel)]
        lines += ["    }"]
    lines += ["  }"]
    # Every output's sum in one fold (a dead row's are zeros), each finished by thread `slot`, which then runs
    # that output's epilogue: the GEMV_ROWS outputs of a row group fold and store in parallel.
    values = 1 << (len(slots) - 1).bit_length()
    sums = ", ".join([f"lm_acc{g}_{j}" for g, j in slots] + ["0"] * (values - len(slots)))
    acc = COMPUTE[gemv.reduction.dtype]
    lines += [f"  {acc} lm_each[{values}] = {{{sums}}};"]
    lines += [
        f"  const {acc} lm_folded = lm_block_fold_many({values}, {-(-launch.block // 32)}, lm_each, lm_fold_sum());"
    ]
    return lines + _epilogue(launch, k, gemv, buffers, firsts, lives, numel)


def _epilogue(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, buffers, firsts, lives, numel: str) -> list[str]:
    """Thread `slot` < rows x GEMV_ROWS finishes output j of row g (slot = g * GEMV_ROWS + j): the sum rounded to its
    type, the rest of the body, the store."""
    out = ShapeTracker.contiguous(k.shape).index.render_c()
    axes = tuple(range(len(k.shape)))
    total = CUDA.round("lm_total", gemv.reduction.dtype)
    acc = COMPUTE[gemv.reduction.dtype]
    lines = [
        f"  const int lm_slot = {CUDA.thread_index};",
        f"  if (lm_slot < {len(firsts) * GEMV_ROWS}) {{",
        f"    const int64_t lm_firsts[{len(firsts)}] = {{{', '.join(f'lm_first{g}' for g in range(len(firsts)))}}};",
        f"    const bool lm_lives[{len(lives)}] = {{{', '.join(lives)}}};",
        f"    const int64_t lm_flat = lm_firsts[lm_slot / {GEMV_ROWS}] + lm_slot % {GEMV_ROWS};",
        f"    if (lm_lives[lm_slot / {GEMV_ROWS}] && lm_flat < {numel}) {{",
    ]
    lines += ["      " + s for s in decode("lm_flat", k.shape, axes)]
    lines += [f"      const {acc} lm_total = lm_folded;", f"      const {acc} lm_acc = {total};"]
    e = CudaEmitter(pointers(launch))
    e.indent = 3
    value = e.emit(gemv.epilogue)
    store = CUDA.store(value, buffers[k.out].dtype)
    return lines + e.lines + [f"      {pointers(launch)[k.out]}[{out}] = {store};", "    }", "  }"]
