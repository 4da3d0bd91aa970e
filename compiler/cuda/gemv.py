"""CUDA for a GEMV kernel (compiler/gemv_plan.py): split-K, several outputs per block, 16-byte weight loads.

A block of THREADS threads computes GEMV_ROWS consecutive outputs (along the N axis, so they share the input
vector, which stays in L1). The contraction is split over all the block's threads in chunks of `width`
elements: per chunk and output, a thread reads the weight row's `width` elements with one 16-byte load
(lm_load16, prelude.py) and evaluates the sum's body at each of them, the stream operand standing for the
loaded element, everything else (the input vector, a dequantising scale) as the generic emitter writes it. The
GEMV_ROWS loads of a chunk are independent, so each thread keeps several in flight. Partial sums are float32
(double for a float64 sum); they are folded by warp shuffles then one word per warp in shared memory
(lm_block_fold): the same order every run, no atomics. Thread 0 then runs the epilogue (bias, activation,
residual, casts) on each output and stores.
A block past the last output computes the last one again (all threads must reach the folds) and stores nothing.
Where the sum's body is the stream times a factor that does not read the N axis (the input vector, or a fused
producer of it such as the MLP's silu(gate) * up), that factor is computed once per block into shared memory
before the loop: when the N axis's length is a multiple of GEMV_ROWS (a block's outputs share their other
indices) and K values fit MAX_STAGED_BYTES (launch.staged). A norm fused into that factor (norm_prologue.py)
has its row statistics computed first, split over the block and folded as a row kernel folds them.
"""

from __future__ import annotations

from dataclasses import replace

from luminal.compiler import hoist, ir
from luminal.compiler.cuda.emitter import CudaEmitter
from luminal.compiler.cuda.kernels import FOOT, head, pointers
from luminal.compiler.cuda.launch import GEMV_ROWS, Launch, staged
from luminal.compiler.dialects import COMPUTE, CUDA
from luminal.compiler.gemm_operands import decode
from luminal.compiler.gemv_plan import GemvPlan
from luminal.symbolic import var
from luminal.view import ShapeTracker, dims_product

LOADED = "lm_wv"  # the chunk's weight elements, a local array standing for the stream operand
STAGED = "lm_x"  # the block's input vector in shared memory


def _stage(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, numel: str) -> list[str]:
    """The vector at every step of the contraction, at the block's first output's indices, in shared memory.
    Its row statistics (a fused norm's sum of squares) are computed first, split over the block and folded, as
    a row kernel computes them (compiler/cuda/kernels.py); every thread reaches those folds."""
    r, extent = gemv.reduction.var, gemv.reduction.extent.value
    lines = [f"  __shared__ {COMPUTE[gemv.vector.dtype]} {STAGED}[{extent}];", "  {"]
    lines += [f"    const int64_t lm_flat = lm_first < {numel} ? lm_first : {numel} - 1;"]
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
    return lines + e.lines + [f"      {STAGED}[{r}] = {value};", "    }", "  }", f"  {CUDA.barrier}"]


def _row(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, j: int, numel: str) -> list[str]:
    """One output's share of a chunk: its indices, the weight load, the body at each element, the sum."""
    r, width, stream = gemv.reduction.var, gemv.width, gemv.stream
    axes = tuple(range(len(k.shape)))
    lines = ["    {", f"      const int64_t lm_flat = lm_first + {j} < {numel} ? lm_first + {j} : {numel} - 1;"]
    lines += ["      " + s for s in decode("lm_flat", k.shape, axes)]
    body = gemv.reduction.body
    if staged(k, gemv):
        body = _substitute_load(body, gemv.vector, hoist.Hoisted(f"{STAGED}[{r}]", gemv.vector.dtype))
    if width > 1:
        at = stream.index.substitute({r: var("lm_k0")}).render_c()
        ptr = pointers(launch)[stream.buffer]
        local = ir.Load(LOADED, var("lm_e"), stream.dtype)
        body = _substitute_load(body, stream, local)
        lines += [
            f"      {CUDA.storage[stream.dtype]} {LOADED}[{width}];",
            f"      lm_load16(&{ptr}[{at}], {LOADED});",
            "      #pragma unroll",
            f"      for (int lm_e = 0; lm_e < {width}; lm_e++) {{",
            f"        const int64_t {r} = lm_k0 + lm_e;",
        ]
    else:
        lines += ["      {", f"        const int64_t {r} = lm_k0;"]
    e = CudaEmitter({**pointers(launch), LOADED: LOADED})
    e.indent = 4
    value = e.emit(body)
    return lines + e.lines + [f"        lm_acc{j} += {value};", "      }", "    }"]


def _substitute_load(v: ir.Value, old: ir.Value, new: ir.Value) -> ir.Value:
    if v == old:
        return new
    if isinstance(v, ir.Apply):
        return replace(v, args=tuple(_substitute_load(a, old, new) for a in v.args))
    if isinstance(v, ir.Guard):
        return replace(v, value=_substitute_load(v.value, old, new))
    return v


def kernel_source(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, buffers, symbols) -> list[str]:
    numel = dims_product(k.shape).render_c()
    rows = GEMV_ROWS
    chunks = gemv.reduction.extent.render_c() if gemv.width == 1 else f"{gemv.reduction.extent.value // gemv.width}"
    lines = head(launch, buffers, symbols)
    lines += [f"  const int64_t lm_first = {CUDA.block_index} * {rows};"]
    lines += _stage(launch, k, gemv, numel) if staged(k, gemv) else []
    lines += [f"  {COMPUTE[gemv.reduction.dtype]} lm_acc{j} = 0;" for j in range(rows)]
    lines += [f"  for (int64_t lm_c = {CUDA.thread_index}; lm_c < {chunks}; lm_c += {launch.block}) {{"]
    lines += [f"    const int64_t lm_k0 = lm_c * {gemv.width};"]
    for j in range(rows):
        lines += _row(launch, k, gemv, j, numel)
    lines += ["  }"]
    lines += [f"  lm_acc{j} = lm_block_fold(lm_acc{j}, lm_fold_sum());" for j in range(rows)]
    return lines + _epilogue(launch, k, gemv, buffers, numel) + FOOT


def _epilogue(launch: Launch, k: ir.LoopKernel, gemv: GemvPlan, buffers, numel: str) -> list[str]:
    """Thread 0 finishes each output: the sum rounded to its type, the rest of the body, the store."""
    out = ShapeTracker.contiguous(k.shape).index.render_c()
    axes = tuple(range(len(k.shape)))
    total = CUDA.round("lm_total", gemv.reduction.dtype)
    acc = COMPUTE[gemv.reduction.dtype]
    lines = ["  if (threadIdx.x == 0) {", f"    const {acc} lm_sums[{GEMV_ROWS}] = {{"]
    lines[-1] += ", ".join(f"lm_acc{j}" for j in range(GEMV_ROWS)) + "};"
    lines += [
        f"    for (int lm_j = 0; lm_j < {GEMV_ROWS}; lm_j++) {{",
        "      const int64_t lm_flat = lm_first + lm_j;",
        f"      if (lm_flat >= {numel}) break;",
    ]
    lines += ["      " + s for s in decode("lm_flat", k.shape, axes)]
    lines += [f"      const {acc} lm_total = lm_sums[lm_j];", f"      const {acc} lm_acc = {total};"]
    e = CudaEmitter(pointers(launch))
    e.indent = 3
    value = e.emit(gemv.epilogue)
    store = CUDA.store(value, buffers[launch.buffers[0]].dtype)
    return lines + e.lines + [f"      _q0[{out}] = {store};", "    }", "  }"]
