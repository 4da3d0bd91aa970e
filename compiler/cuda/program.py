"""The whole CUDA source of a kernel program, and its launch plan.

The source is deterministic: the prelude, then each kernel's __global__ function(s) in program order, named
after the IR kernel (`k12`; a scatter's two are `k12_copy` and `k12_scatter`), each preceded by a comment
giving its launch; mma.h and 16-byte copies follow the prelude where a GEMM runs on tensor cores ("mma"). A GEMM
given to cuBLAS has no kernel: its comment names the call (`k12_cublas: cublas`) and its arguments; consecutive
in-place scatters are one kernel (`k12_to_k18_scatters`), and so are consecutive GEMVs that can share a grid
(`k12_to_k16_gemvs`), consecutive warp kernels over the same elements (`k12_to_k14_warps`) and consecutive
independent thread kernels over the same elements (`k12_to_k14_threads`). The kernels the runtime runs once at
load (compiler/kernels/derived_weights.py) come first, in a launch plan of their own.
Compiled with NVRTC or nvcc (`--fmad=false`: every op rounds as the reference does; the GEMM and attention
kernels ask for their FMAs with fmaf), or as C++ through the host shim (runtime/cuda/host_shim/).
"""

from __future__ import annotations

from dataclasses import replace

from luminal.compiler.analysis.gemm_plan import plan
from luminal.compiler.cuda import arrivals, gemm_mma, library_gemm, mma_staging
from luminal.compiler.cuda.half_operands import tensor_core_type
from luminal.compiler.cuda.prelude import PRELUDE
from luminal.compiler.gpu import program as gpu_program
from luminal.compiler.gpu.launch import Launch, launches
from luminal.compiler.gpu.planned_once import planned_once
from luminal.compiler.gpu.program import merged, shared_kernel_source
from luminal.compiler.kernels import derived_weights, ir
from luminal.compiler.storage.run_plan import RunPlan
from luminal.view import dims_product


def kernel_launches(k: ir.Kernel, p: ir.KernelProgram) -> list[Launch]:
    """The launches of kernel `k` of program `p`: launch.py's, with a GEMM whose operands are half values
    (compiler/cuda/half_operands.py) moved onto tensor cores ("mma", the same grid of 64 x 64 tiles), a
    kernel the program gives to cuBLAS one "cublas" step (compiler/cuda/library_gemm.py), and a flash-decoding
    attention with arrival counters one "flash_decode" launch (compiler/cuda/arrivals.py)."""
    planned = launches(k, ir.buffers_in_order(k))
    if p.library.get(k.name) == library_gemm.CUBLAS:
        call = library_gemm.gemm_call(p, k)
        if call is None:
            raise ValueError(f"kernel {k.name} is given to cuBLAS but is not a GEMM cuBLAS can compute alone")
        elements = dims_product(k.shape)
        return [Launch(f"{k.name}_cublas", library_gemm.CUBLAS, elements, 0, planned[0].buffers, call)]
    if p.library.get(k.name) is not None:
        raise ValueError(f"kernel {k.name}: unknown library {p.library[k.name]!r}; known: {library_gemm.LIBRARIES}")
    if planned[0].shape == "gemm" and tensor_core_type(p, k, plan(k)) is not None:
        return [replace(planned[0], shape="mma", block=gemm_mma.THREADS)]
    return arrivals.fold_combine(k, p, planned)


@planned_once  # the ranking, the source and the run plan each ask for it
def planned_launches(p: ir.KernelProgram, at_load: bool = False) -> list[tuple[tuple[ir.Kernel, ...], Launch]]:
    """Every launch of a run of the program, in order, with the kernels it runs: its own kernel's, but for
    consecutive in-place scatters merged into one "scatters" launch (compiler/gpu/scatter_batch.py),
    consecutive GEMVs into one "gemvs" launch (compiler/gpu/gemv_batch.py), consecutive warp kernels over the
    same elements into one "warps" launch (compiler/gpu/warp_batch.py) and consecutive independent thread
    kernels over the same elements into one "threads" launch (compiler/gpu/thread_batch.py). With `at_load`,
    the launches of the kernels run once when the program is loaded instead (compiler/kernels/derived_weights.py)."""
    chosen = [k for k in p.kernels if derived_weights.at_load(k, p.buffers) == at_load]
    return merged([((k,), launch) for k in chosen for launch in kernel_launches(k, p)], p)


def launched_together(p: ir.KernelProgram) -> list[tuple[str, ...]]:
    """The kernels (by name) of each launch that runs several (compiler/gpu/program.py's `together`)."""
    return gpu_program.together(planned_launches(p))


def launch_plan(p: ir.KernelProgram) -> list[Launch]:
    """Every launch of a run of the program, in order."""
    return [launch for _, launch in planned_launches(p)]


def load_plan(p: ir.KernelProgram) -> list[Launch]:
    """The launches the runtime issues once, after binding the weights: the kernels of derived buffers."""
    return [launch for _, launch in planned_launches(p, at_load=True)]


def run_plan(p: ir.KernelProgram) -> RunPlan:
    """What the CUDA runtime and the host shim read instead of planning again (compiler/gpu/program.py)."""
    return gpu_program.run_plan(p, planned_launches)


def kernel_source(launch: Launch, k: ir.Kernel, p: ir.KernelProgram, symbols: list[str]) -> list[str]:
    """The shared GPU kernel sources (compiler/gpu/program.py), with CUDA's own shapes: a cuBLAS step and a
    tensor-core GEMM."""
    if launch.shape == library_gemm.CUBLAS:  # no kernel: the source names the call the runtime makes
        return [f"/* {launch.call.describe()} */"]
    if launch.shape == "mma":
        half = tensor_core_type(p, k, plan(k))
        return gemm_mma.kernel_source(launch, k, plan(k), half, p.buffers, symbols)
    return shared_kernel_source(launch, k, p, symbols)


def program_source(p: ir.KernelProgram) -> str:
    symbols = sorted(p.symbols)
    parts = [PRELUDE]
    planned = [(once, *step) for once in (True, False) for step in planned_launches(p, at_load=once)]
    if any(launch.shape == "mma" for _, _, launch in planned):
        parts.append(mma_staging.HELPERS)
    for once, members, launch in planned:
        comment = f"/* {launch.kernel}: {launch.shape}, {launch.grid} blocks of {launch.block} threads"
        if launch.call is not None:
            comment = f"/* {launch.kernel}: {launch.shape}, a library call the runtime issues"
        comment += ", once at load */" if once else " */"
        parts.append("\n".join([comment, *launch_source(launch, members, p, symbols)]))
    return "\n\n".join(parts) + "\n"


def launch_source(launch: Launch, members: tuple[ir.Kernel, ...], p: ir.KernelProgram, symbols: list[str]) -> list[str]:
    """The kernel of one launch of the plan, merged or not; its first line is its signature."""
    return gpu_program.launch_source(launch, members, p, symbols, kernel_source)
