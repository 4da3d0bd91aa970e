"""A roofline cost model: how long a kernel takes on a target if it runs at the slower of its two roofs.

    seconds = max(bytes / memory_bandwidth, flops / peak_flops) + launch_overhead

It ranks candidate programs (DESIGN.md, "Extraction and selection"); where the device is present, profiling
decides. The model is deliberately optimistic about caching: a buffer's bytes cross the memory bus at most
once per kernel, however often the kernel reads each element (min(element reads, buffer size)), and every
output element is written once. What it does capture is what the search trades off: fusion saves the bytes
of intermediate buffers and the launches of their kernels, and recomputation inside a fused kernel costs flops.

Symbolic sizes are evaluated with `env` (symbol name -> value). A symbol `env` does not bind, and every size
when env is None, takes the top of its declared range (`lm.sym(..., max=)`): the cost of the largest shape
the program is compiled for, which is the shape that decides whether a candidate is fast enough.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from luminal.compiler.analysis import gemm_plan, gemv_plan, int_gemm_plan
from luminal.compiler.analysis.targets import Target, get_target
from luminal.compiler.kernels import hoist, ir
from luminal.compiler.kernels.derived_weights import ROLE, at_load
from luminal.symbolic import Expr, as_expr

# FLOPs charged per element for an op, relative to an add or multiply (1). NVIDIA's CUDA C++ Programming
# Guide (arithmetic instruction throughput table) gives 16 special-function results per clock per SM against
# 64-128 fp32 adds/multiplies on compute capability 8.x-9.0: a transcendental costs ~4 simple ops' issue
# slots. Sin also needs range reduction for full-precision arguments, hence more.
OP_FLOPS = {"Log2": 4, "Exp2": 4, "Sqrt": 4, "Recip": 4, "Sin": 8}


@dataclass(frozen=True)
class KernelCost:
    name: str
    flops: int
    bytes_read: int
    bytes_written: int
    seconds: float

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved: above the target's peak_flops / memory_bandwidth the kernel is compute-bound."""
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass(frozen=True)
class ProgramCost:
    target: str
    flops: int
    bytes_read: int
    bytes_written: int
    seconds: float  # a run: its kernels run one after another, so their times add, less the launches they share
    kernels: list[KernelCost] = field(default_factory=list)
    launches: int = 0  # a run's launches: its kernels, less those that share a launch with another
    load_seconds: float = 0.0  # the kernels run once at load (derived weights), as estimated
    resident_bytes: int = 0  # what a loaded program keeps beside its arena: the weights a run reads, derived buffers


def size(e: Expr | int, env: dict[str, int] | None) -> int:
    """The value of a size expression: bound symbols substituted, the rest at the top of their range."""
    e = as_expr(e)
    if env:
        e = e.substitute({k: int(v) for k, v in env.items()})
    return max(int(e.hi), 0)


class _Counter:
    """Walks value trees, counting FLOPs per evaluation and element reads per buffer."""

    def __init__(self, env: dict[str, int] | None, gemm: bool = False):
        self.env = env
        self.gemm = gemm  # the kernel runs as a GEMM: its one Contract is computed once, however often it appears
        self.seen: set[ir.Contract] = set()
        self.applied: set[tuple[ir.Apply, int]] = set()
        self.reads: Counter[str] = Counter()
        self.gemm_flops = 0  # the multiply-adds of Contracts: they run as tiled GEMMs (matrix units on GPUs)
        self.gemm_elements = 0  # with `gemm`, the kernel's output elements: its accumulator's count
        self.gemm_rows = self.gemm_cols = 1  # with `gemm`, its M and N extents

    def flops(self, v: ir.Value, evals: int, loop: tuple[str, Expr] | None = None) -> int:
        """FLOPs of evaluating `v` `evals` times; every buffer element read is tallied in self.reads.

        `loop` is the innermost loop around `v` that the code generator hoists invariant reductions out of
        (compiler/kernels/hoist.py), as (variable, trip count), while only element-wise ops lie between: a reduction
        it hoists runs `evals / trip count` times."""
        if isinstance(v, ir.Load):
            self.reads[v.buffer] += evals
            return 0
        if isinstance(v, ir.GatherLoad):
            self.reads[v.buffer] += evals
            return self.flops(v.at, evals)
        if isinstance(v, ir.Guard):  # a select on an index predicate: index arithmetic, not data FLOPs
            return self.flops(v.value, evals)
        if isinstance(v, ir.Apply):
            # Equal subtrees at the same trip count are one computation: value trees repeat shared operands
            # (an erf polynomial reads its argument eight times) and the C compiler evaluates them once.
            if (v, evals) in self.applied:
                return 0
            self.applied.add((v, evals))
            return evals * OP_FLOPS.get(v.op, 1) + sum(self.flops(a, evals, loop) for a in v.args)
        if isinstance(v, ir.Reduce):
            if loop is not None and hoist.invariant_reductions(v, loop[0], loop[1]):
                evals = max(evals // size(loop[1], self.env), 1)
            # The body runs `extent` times per evaluation, each followed by one fold (add or max): a
            # matmul's sum of products is the conventional 2 FLOPs per multiply-accumulate.
            n = evals * size(v.extent, self.env)
            return n + self.flops(v.body, n, (v.var, v.extent))
        if isinstance(v, ir.Contract):
            if self.gemm and v in self.seen:
                return 0
            self.seen.add(v)
            if self.gemm:  # once per output element, even inside a reduction that reads it (codegen_gemm._lift)
                n = self.gemm_elements * size(v.extent, self.env)
                self.gemm_flops += 2 * n
                # A tiled GEMM evaluates an operand's expression (a widening cast, a dequantisation) as it stages
                # the element, not per multiply-add: once per element, as optimistic as the bytes.
                a, b = max(n // self.gemm_cols, 1), max(n // self.gemm_rows, 1)
                return 2 * n + self.flops(v.a, a) + self.flops(v.b, b)
            n = evals * size(v.extent, self.env)
            self.gemm_flops += 2 * n
            return 2 * n + self.flops(v.a, n) + self.flops(v.b, n)
        if isinstance(v, ir.Attend):
            # Per output element: its share of the row's scores (q·k over E, taken as long as the output row,
            # which it is when v's head dim equals q's), the softmax's few ops per score, and p·v.
            n = evals * size(v.s_extent, self.env)
            self.gemm_flops += 4 * n
            operands = sum(self.flops(x, evals) for x in (v.q, v.k, v.v, v.bias))
            return 4 * n + 6 * n // max(size(v.e_extent, self.env), 1) + operands
        return 0  # Const, IndexValue: no data arithmetic


def _elements(shape: tuple[Expr, ...], env: dict[str, int] | None) -> int:
    n = 1
    for d in shape:
        n *= size(d, env)
    return n


def estimate(
    kernel: ir.Kernel,
    buffers: dict[str, ir.Buffer],
    target: Target | str,
    env: dict[str, int] | None = None,
    library: str | None = None,
) -> KernelCost:
    """The roofline cost of one kernel over `buffers` (a KernelProgram's) on `target`; `library` names the
    library that computes a GEMM kernel instead of generated code (KernelProgram.library)."""
    target = get_target(target)
    if library is not None:
        return _library_gemm(kernel, buffers, target, env)
    gemm = gemm_plan.plan(kernel) or int_gemm_plan.plan(kernel)  # the integer GEMM packs its operands too
    count = _Counter(env, gemm=gemm is not None)
    n_out = count.gemm_elements = _elements(kernel.shape, env)
    if gemm is not None:
        count.gemm_rows, count.gemm_cols = (
            _elements([kernel.shape[j] for j in axes], env) for axes in (gemm.m, gemm.n)
        )
    if isinstance(kernel, ir.LoopKernel):
        # The C hoists row statistics out of a loop kernel's innermost loop, except in a GEMM's epilogue.
        inner = None if count.gemm or not kernel.shape else (f"_i{len(kernel.shape) - 1}", kernel.shape[-1])
        body, flops = _staged_vector(kernel, count, n_out, target) if gemm is None else (kernel.body, 0)
        flops += count.flops(body, n_out, inner)
    else:
        n_src = _elements(kernel.src_shape, env)
        flops = count.flops(kernel.at, n_src) + count.flops(kernel.src, n_src)
        if kernel.out in ir.buffers_read(kernel):  # in place (compiler/kernels/in_place.py): no copy of the destination
            n_out = n_src  # what it writes: a paged step's pools cost the positions written, not the whole pool
        else:
            flops += count.flops(kernel.dest, n_out)
    bytes_read = 0
    for name, reads in count.reads.items():
        buf = buffers[name]
        bytes_read += min(reads, size(buf.size, env)) * buf.dtype.itemsize
    out = buffers[kernel.out]
    # A scatter's updates land in the output it has just written, so they are caught by the same caching.
    bytes_written = n_out * out.dtype.itemsize
    compute = count.gemm_flops / (target.peak_for(out.dtype, matrix_units=True) * target.gemm_efficiency)
    compute += (flops - count.gemm_flops) / (target.peak_for(out.dtype) * target.loop_efficiency)
    seconds = max((bytes_read + bytes_written) / target.memory_bandwidth, compute)
    return KernelCost(kernel.name, flops, bytes_read, bytes_written, seconds + target.launch_overhead_s)


class KernelCosts:
    """`estimate` over one program's buffers, each kernel object estimated once (and held, so that its id stays
    its own): a fusion pass asks of the same producer and readers again at each step that reads them."""

    def __init__(self, buffers: dict[str, ir.Buffer], target: Target | str, env: dict[str, int] | None = None):
        self.buffers, self.target, self.env = buffers, get_target(target), env
        self.found: dict[int, tuple[ir.Kernel, KernelCost]] = {}

    def __call__(self, kernel: ir.Kernel) -> KernelCost:
        found = self.found.get(id(kernel))
        if found is None:
            found = self.found[id(kernel)] = (kernel, estimate(kernel, self.buffers, self.target, self.env))
        return found[1]


def _staged_vector(kernel: ir.LoopKernel, count: _Counter, n_out: int, target: Target) -> tuple[ir.Value, int]:
    """A GEMV's body without its vector, and the FLOPs of computing that vector: on a target that stages it
    (compiler/gpu/gemv.py: once per block, a fused norm's statistics with it), once per element of it and row,
    as optimistic as the bytes; elsewhere the body as it is, the vector counted where it is read."""
    gemv = gemv_plan.plan(kernel) if target.stages_gemv_vectors else None
    if gemv is None or gemv.vector is None:
        return kernel.body, 0
    rows = n_out // max(size(kernel.shape[-1], count.env), 1)
    flops = count.flops(gemv.vector, rows * size(gemv.reduction.extent, count.env))
    staged = ir.Const(0.0, gemv.vector.dtype)  # read from where it was staged: no arithmetic per output
    return ir.rebuilt(kernel.body, lambda v: staged if v == gemv.vector else None), flops


def _library_gemm(kernel: ir.Kernel, buffers: dict[str, ir.Buffer], target: Target, env) -> KernelCost:
    """A GEMM computed by a library call: its multiply-adds at the library's share of the peak of its operands'
    type, every operand and the output crossing memory once, and the call's fixed cost on top of a launch."""
    if not target.library_gemm_efficiency:
        raise ValueError(f"target {target.name} has no library GEMMs; kernel {kernel.name} cannot be one")
    gemm = gemm_plan.plan(kernel)
    operand = next(n.dtype for n in ir.walk(gemm.contract.a) if isinstance(n, ir.Load))
    count = _Counter(env, gemm=True)
    count.gemm_elements = _elements(kernel.shape, env)
    count.gemm_rows, count.gemm_cols = (_elements([kernel.shape[j] for j in axes], env) for axes in (gemm.m, gemm.n))
    count.flops(gemm.contract, 1)
    bytes_read = sum(min(n, size(buffers[b].size, env)) * buffers[b].dtype.itemsize for b, n in count.reads.items())
    bytes_written = count.gemm_elements * buffers[kernel.out].dtype.itemsize
    compute = count.gemm_flops / (target.peak_for(operand, matrix_units=True) * target.library_gemm_efficiency)
    seconds = max((bytes_read + bytes_written) / target.memory_bandwidth, compute)
    seconds += target.launch_overhead_s + target.library_call_s
    return KernelCost(kernel.name, count.gemm_flops, bytes_read, bytes_written, seconds)


def estimate_program(
    program: ir.KernelProgram,
    target: Target | str,
    env: dict[str, int] | None = None,
    together: Iterable[Sequence[str]] = (),
) -> ProgramCost:
    """Every kernel's cost and their sum: the number candidates are ranked by. `together` names the kernels of
    each launch that runs several (the backend's `launched_together`): they pay one launch overhead between them.
    Kernels run once at load (compiler/kernels/derived_weights.py) are not part of a run: their cost is
    `load_seconds`, and what they make is resident (`resident_bytes`)."""
    target = get_target(target)
    run = [k for k in program.kernels if not at_load(k, program.buffers)]
    kernels = [estimate(k, program.buffers, target, env, program.library.get(k.name)) for k in run]
    once = [k for k in program.kernels if at_load(k, program.buffers)]
    load = sum(estimate(k, program.buffers, target, env, program.library.get(k.name)).seconds for k in once)
    shared = sum(len(names) - 1 for names in together)
    return ProgramCost(
        target.name,
        sum(k.flops for k in kernels),
        sum(k.bytes_read for k in kernels),
        sum(k.bytes_written for k in kernels),
        sum(k.seconds for k in kernels) - shared * target.launch_overhead_s,
        kernels,
        len(kernels) - shared,
        load,
        resident_bytes(program, run),
    )


def resident_bytes(program: ir.KernelProgram, run: list[ir.Kernel]) -> int:
    """Bytes a loaded program holds for as long as it is loaded: the weights its `run` kernels read (a runtime
    lets go of one only the load's kernels read) and every derived buffer."""
    read = set().union(*(ir.buffers_read(k) for k in run))
    held = [b for name, b in program.buffers.items() if b.role == ROLE or (b.role == "weight" and name in read)]
    return sum(size(b.size, None) * b.dtype.itemsize for b in held)
