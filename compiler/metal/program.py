"""The whole MSL source of a kernel program.

A Metal program runs the CUDA launch plan (compiler/gpu/launch.py: a launch is `grid` threadgroups of `block`
threads, its buffers in order, outputs first), merged launches included (consecutive GEMVs, scatters, warp and
thread kernels: one dispatch each run), with the CUDA generator's kernel bodies; each kernel's signature is
Metal's: the buffers as `[[buffer(j)]]` arguments in launch order, then the dims block `D` (`constant`) and the
status flag, then the dispatch's indices. The runtime (runtime/metal/) binds them in that order, and encodes the
kernels of derived buffers once at load (`load_plan`), the rest on every run (`launch_plan`). Deterministic,
like the CUDA source; a source that still spells something MSL lacks, or a kernel with more buffer arguments
than Metal binds, is refused with the reason.
"""

from __future__ import annotations

import re

from luminal.compiler.gpu import program as gpu_program
from luminal.compiler.gpu.launch import Launch, launches
from luminal.compiler.gpu.launch_runs import Planned
from luminal.compiler.gpu.planned_once import planned_once
from luminal.compiler.kernels import derived_weights, ir
from luminal.compiler.metal.prelude import PRELUDE
from luminal.compiler.renderer.dialects import CUDA, METAL
from luminal.compiler.storage.run_plan import RunPlan

# A dispatch's buffer arguments: the table's entries less the dims block and the status flag.
MAX_BUFFERS = METAL.max_buffers - 2


def launch_plan(p: ir.KernelProgram, at_load: bool = False) -> list[Launch]:
    """CUDA's launches (Metal dispatches threadgroups as CUDA launches blocks), without the tensor-core GEMMs
    (`nvcuda::wmma` has no MSL spelling here: half GEMMs stay on the SIMT kernel) and without flash decoding's
    arrival counters (its split and combine stay two dispatches), with CUDA's merges of consecutive scatters,
    GEMVs, warp and thread kernels within MAX_BUFFERS. With `at_load`, those of the kernels run once when the
    program is loaded instead (compiler/kernels/derived_weights.py)."""
    return [launch for _, launch in planned_launches(p, at_load)]


def load_plan(p: ir.KernelProgram) -> list[Launch]:
    """The dispatches the runtime encodes once, after binding the weights: the kernels of derived buffers."""
    return launch_plan(p, at_load=True)


@planned_once  # the ranking, the source and the run plan each ask for it
def planned_launches(p: ir.KernelProgram, at_load: bool = False) -> list[Planned]:
    """Each dispatch of a run (or, with `at_load`, of the load) with the kernels it runs."""
    chosen = [k for k in p.kernels if derived_weights.at_load(k, p.buffers) == at_load]
    plan = [((k,), launch) for k in chosen for launch in launches(k, ir.buffers_in_order(k))]
    return gpu_program.merged(plan, p, MAX_BUFFERS)


def launched_together(p: ir.KernelProgram) -> list[tuple[str, ...]]:
    """The kernels (by name) of each dispatch that runs several, as on CUDA (compiler/gpu/program.py's `together`)."""
    return gpu_program.together(planned_launches(p))


def run_plan(p: ir.KernelProgram) -> RunPlan:
    """What the Metal runtime and its shim read instead of planning again (compiler/gpu/program.py)."""
    return gpu_program.run_plan(p, planned_launches)


class MetalUnsupported(ValueError):
    """The program needs something Metal does not have; the message names it."""


def signature(launch: Launch, buffers: dict[str, ir.Buffer]) -> str:
    written = range(launch.writes)  # a merged dispatch's members' outputs come first
    params = [METAL.buffer(j, buffers[name].dtype, f"_q{j}", j in written) for j, name in enumerate(launch.buffers)]
    n = len(launch.buffers)
    params += [f"constant int64_t* D [[buffer({n})]]", f"device int* lm_status [[buffer({n + 1})]]"]
    params += [f"uint3 {name} [[{attribute}]]" for name, attribute in METAL.indices.items()]
    return f"{METAL.kernel} {launch.kernel}({', '.join(params)}) {{"


def kernel_source(launch: Launch, members: tuple[ir.Kernel, ...], p: ir.KernelProgram, symbols: list[str]) -> list[str]:
    if len(launch.buffers) > MAX_BUFFERS:
        raise MetalUnsupported(
            f"kernel {launch.kernel} takes {len(launch.buffers)} buffers plus the dims and status: Metal binds at "
            f"most {METAL.max_buffers} buffer arguments per kernel"
        )
    lines = gpu_program.launch_source(launch, members, p, symbols)
    if not lines[0].startswith(CUDA.kernel):  # the shared body's first line is its CUDA signature
        raise AssertionError(f"kernel {launch.kernel}: unexpected first line {lines[0]!r}")
    head = [signature(launch, p.buffers)]
    if any("lm_block_fold" in line for line in lines):  # threadgroup memory is declared at kernel scope
        words = [1024 // METAL.simd_width]  # a word per SIMD group of the largest threadgroup
        for line in lines:  # lm_block_fold_many(V, W, ...): V words per SIMD group
            words += [int(v) * int(w) for v, w in re.findall(r"lm_block_fold_many\((\d+), (\d+),", line)]
        head.append(f"  {METAL.shared} uint64_t lm_scratch[{max(words)}];")
    return head + lines[1:]


def refuse_what_msl_lacks(source: str) -> None:
    for spelling, why in METAL.lacks.items():
        # The substring test first: it rules a spelling out in a scan, where the word-boundary search is slow
        # (a tenth of a Metal compile over seven spellings).
        if spelling in source and re.search(rf"\b{spelling}\b", source):
            raise MetalUnsupported(f"the generated MSL uses `{spelling}`: {why}")


def program_source(p: ir.KernelProgram) -> str:
    symbols = sorted(p.symbols)
    parts = [PRELUDE]
    for at_load in (True, False):
        once = ", once at load" if at_load else ""
        for members, launch in planned_launches(p, at_load):
            grid = f"{launch.grid} threadgroups of {launch.block} threads"
            comment = f"/* {launch.kernel}: {launch.shape}, {grid}{once} */"
            parts.append("\n".join([comment, *kernel_source(launch, members, p, symbols)]))
    source = "\n\n".join(parts) + "\n"
    refuse_what_msl_lacks(source)
    return source
