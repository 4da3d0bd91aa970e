"""CUDA for the loop-shaped kernels (a thread, a warp or a block per output element or row) and for scatters.

Every kernel opens the same way (`head`): its pointers in launch order, `_q0` the output, then the program's
symbols read from the dims block D, and a local error flag that gathers set and the kernel's last line
reports. A grid may be larger than the dims in D need: a CUDA graph captured for a shape bucket launches every
kernel with the grid of the bucket's largest dims (runtime/cuda/). So a kernel whose grid depends on a symbol
first returns from every block past the grid at the live dims; that exit is the whole block's, so no barrier is
left waiting. Past that line kernels never return early: a thread past the end still reaches every fold and
barrier its group runs.
"""

from __future__ import annotations

from luminal.compiler.analysis.gemm_operands import decode
from luminal.compiler.gpu.emitter import CudaEmitter
from luminal.compiler.gpu.launch import WARPS, Launch
from luminal.compiler.kernels import hoist, ir
from luminal.compiler.renderer.dialects import COMPUTE, CUDA
from luminal.view import dims_product

# Blocks per SM the register budget must allow: up to 128 registers a thread. With the thread count alone as
# the bound, ptxas aimed at 64 and spilled a GEMM's 64-bit index arithmetic (divisions by a symbol are calls).
MIN_BLOCKS = 2


def pointers(launch: Launch) -> dict[str, str]:
    return {name: f"_q{j}" for j, name in enumerate(launch.buffers)}


def head(launch: Launch, buffers: dict[str, ir.Buffer], symbols: list[str]) -> list[str]:
    params = []
    for j, name in enumerate(launch.buffers):
        const = "" if j < launch.writes else "const "
        params.append(f"{const}{CUDA.storage[buffers[name].dtype]}* __restrict__ _q{j}")
    params += ["const int64_t* __restrict__ D", "int* __restrict__ lm_status"]
    bounds = f"__launch_bounds__({launch.block}, {MIN_BLOCKS})"
    lines = [f"{CUDA.kernel} {bounds} {launch.kernel}({', '.join(params)}) {{"]
    lines += [f"  const int64_t {s} = D[{j}]; (void){s};" for j, s in enumerate(symbols)]
    if not launch.grid.is_const:  # a bucket's grid: blocks past the live dims' grid have nothing to do
        lines.append(f"  if ({CUDA.block_index} >= {launch.grid.render_c()}) return;")
    return lines + ["  int lm_err = 0;"]


FOOT = ["  if (lm_err) *lm_status = 1;", "}"]


def _all_axes(shape) -> tuple[int, ...]:
    return tuple(range(len(shape)))


def _store(launch: Launch, buffers, position: str, value: str) -> str:
    return f"_q0[{position}] = {CUDA.store(value, buffers[launch.buffers[0]].dtype)};"


def _per_element(launch: Launch, shape, buffers, symbols) -> list[str]:
    """A kernel's opening for a thread per element of `shape`: its flat position, decoded into the axes, in a
    scope that threads past the end skip (the caller closes it)."""
    lines = head(launch, buffers, symbols)
    lines += [
        f"  const int64_t lm_flat = {CUDA.block_index} * {CUDA.block_size} + {CUDA.thread_index};",
        f"  if (lm_flat < {dims_product(shape).render_c()}) {{",
    ]
    return lines + ["    " + s for s in decode("lm_flat", shape, _all_axes(shape))]


def thread_kernel(launch: Launch, shape, body: ir.Value, buffers, symbols) -> list[str]:
    """One thread per element of `shape`: out[flat] = body."""
    lines = _per_element(launch, shape, buffers, symbols)
    e = CudaEmitter(pointers(launch))
    e.indent = 2
    value = e.emit(body)
    lines += e.lines + ["    " + _store(launch, buffers, "lm_flat", value), "  }"]
    return lines + FOOT


def warp_kernel(launch: Launch, k: ir.LoopKernel, buffers, symbols) -> list[str]:
    """A warp per output element, its reductions split over the lanes; lane 0 stores. A warp past the end
    computes the last element again (its lanes must all reach the folds) and stores nothing."""
    lines = head(launch, buffers, symbols)
    numel = dims_product(k.shape).render_c()
    lines += [
        "  const int64_t lm_lane = threadIdx.x & 31, lm_group = 32;",
        f"  const int64_t lm_unit = {CUDA.block_index} * {WARPS} + threadIdx.x / 32;",
        f"  const int64_t lm_flat = lm_unit < {numel} ? lm_unit : {numel} - 1;",
    ]
    lines += ["  " + s for s in decode("lm_flat", k.shape, _all_axes(k.shape))]
    e = CudaEmitter(pointers(launch), "warp")
    value = e.emit(k.body)
    lines += e.lines + [f"  if (lm_lane == 0 && lm_unit < {numel}) " + _store(launch, buffers, "lm_flat", value)]
    return lines + FOOT


def warps_kernel(launch: Launch, members: list[ir.LoopKernel], buffers, symbols) -> list[str]:
    """Warp kernels over the same elements in one launch (compiler/gpu/warp_batch.py), member m storing into
    `_q<m>`: each warp computes them in turn, a later one reading an earlier one's value at its own element from
    the local that holds it (every lane has it) rather than from memory lane 0 may not have written yet."""
    lines = head(launch, buffers, symbols)
    shape = members[0].shape
    numel = dims_product(shape).render_c()
    lines += [
        "  const int64_t lm_lane = threadIdx.x & 31, lm_group = 32;",
        f"  const int64_t lm_unit = {CUDA.block_index} * {WARPS} + threadIdx.x / 32;",
        f"  const int64_t lm_flat = lm_unit < {numel} ? lm_unit : {numel} - 1;",
    ]
    lines += ["  " + s for s in decode("lm_flat", shape, _all_axes(shape))]
    held: dict[str, hoist.Hoisted] = {}
    counter = 0
    for m, k in enumerate(members):
        e = CudaEmitter(pointers(launch), "warp")
        e.counter = counter  # fresh names must not repeat an earlier member's
        body = ir.rebuilt(k.body, lambda n: held.get(n.buffer) if isinstance(n, ir.Load) else None)
        value = e.emit(body)
        name = e.fresh("_twarp")
        dtype = buffers[k.out].dtype
        lines += e.lines + [f"  const {COMPUTE[dtype]} {name} = {value};"]
        lines.append(f"  if (lm_lane == 0 && lm_unit < {numel}) _q{m}[lm_flat] = {CUDA.store(name, dtype)};")
        held[k.out], counter = hoist.Hoisted(name, dtype), e.counter
    return lines + FOOT


def threads_kernel(launch: Launch, members: list[ir.LoopKernel], buffers, symbols) -> list[str]:
    """Independent thread kernels over the same elements in one launch (compiler/gpu/thread_batch.py), member
    m storing into `_q<m>`: a thread computes each at its element in turn, each in a scope of its own."""
    shape = members[0].shape
    lines = _per_element(launch, shape, buffers, symbols)
    for m, k in enumerate(members):
        e = CudaEmitter(pointers(launch))
        e.indent = 3
        value = e.emit(k.body)
        lines += ["    {", *e.lines, f"      _q{m}[lm_flat] = {CUDA.store(value, buffers[k.out].dtype)};", "    }"]
    return lines + ["  }"] + FOOT


def row_kernel(launch: Launch, k: ir.LoopKernel, buffers, symbols) -> list[str]:
    """A block per row: the row's statistics split over the block, then its threads stride over the row."""
    lines = head(launch, buffers, symbols)
    last = len(k.shape) - 1
    width = k.shape[-1].render_c()
    lines += [
        f"  const int64_t lm_lane = {CUDA.thread_index}, lm_group = {CUDA.block_size};",
        f"  const int64_t lm_row = {CUDA.block_index};",
    ]
    lines += ["  " + s for s in decode("lm_row", k.shape, tuple(range(last)))]
    outer = CudaEmitter(pointers(launch), "block")
    row = outer.hoisted(k.body, f"_i{last}", k.shape[-1])
    inner = CudaEmitter(pointers(launch))
    inner.counter, inner.indent = outer.counter, 2  # fresh names must not shadow the statistics' names
    value = inner.emit(row)
    lines += outer.lines
    lines += [f"  for (int64_t _i{last} = lm_lane; _i{last} < {width}; _i{last} += lm_group) {{"]
    lines += inner.lines + ["    " + _store(launch, buffers, f"lm_row * {width} + _i{last}", value), "  }"]
    return lines + FOOT


def scatter_kernel(launch: Launch, k: ir.ScatterKernel, buffers, symbols) -> list[str]:
    """One thread per scattered value: out[at(j)] = src(j). Where two values land on one index, which one wins
    is unspecified on a GPU (the reference keeps the last), as in PyTorch's index_put without accumulate."""
    return scatters_kernel(launch, [k], buffers, symbols)


def scatters_kernel(launch: Launch, members: list[ir.ScatterKernel], buffers, symbols) -> list[str]:
    """Scatters of one source shape in one launch (compiler/gpu/scatter_batch.py), member m's output `_q<m>`:
    a thread per source position scatters its value of each, in turn, each in a scope of its own."""
    shape = members[0].src_shape
    lines = _per_element(launch, shape, buffers, symbols)
    for m, k in enumerate(members):
        e = CudaEmitter(pointers(launch))
        e.indent = 3 if len(members) > 1 else 2
        at, src = e.emit(k.at), e.emit(k.src)
        store = f"_q{m}[_tat] = {CUDA.store(src, buffers[k.out].dtype)};"
        e.stmt(f"const int64_t _tat = (int64_t)({at});")
        e.stmt(f"if (_tat < 0 || _tat >= {k.limit.render_c()}) lm_err = 1; else {store}")
        lines += ["    {", *e.lines, "    }"] if len(members) > 1 else e.lines
    return lines + ["  }"] + FOOT
