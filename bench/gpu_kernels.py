"""What the GPU bench's programs launch, and what ptxas makes of their kernels, without a GPU.

    .venv/bin/python bench/gpu_kernels.py [--small] [--target h100] [--only decode,decode-paged,prefill,encoder]

For each program of bench/gpu.py, the paged decode step the engine runs among them ("decode-paged": KV pools
read through a block table and written in place, no concatenated cache), compiled here from zero weights
(compiling reads shapes only): its launches per run by shape (thread, warp, row, gemm, flash_decode, scatter), and for
each shape the registers, spilled bytes and shared memory that this machine's nvcc reports for sm_90 (the
issue's "register and shared-memory report of the hot kernels"), and the 64-bit integer divisions in a kernel's
PTX (index arithmetic by a launch-time size: each is a subroutine of dozens of instructions on a GPU). Also the
launches' floor at batch-1 decode: a kernel boundary costs ~1.3 us even inside a CUDA graph (Hazy Research's
measurement on an H100), against the copy-bandwidth floor of the bytes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.compiler.cuda.nvcc: the nvcc report parser

from gpu import graphs  # noqa: E402
from gpu_models import FULL, SMALL, decode_bytes, shapes_of, zero_weights  # noqa: E402

import luminal as lm  # noqa: E402
from luminal.compiler.analysis import gemv_plan
from luminal.compiler.analysis.cost import estimate_program  # noqa: E402
from luminal.compiler.cuda.program import kernel_launches, launch_plan, planned_launches  # noqa: E402
from luminal.compiler.gpu import gemv_batch  # noqa: E402
from luminal.compiler.gpu.launch import loop_shape, staged  # noqa: E402
from luminal.compiler.gpu.norm_prologue import bytes_along  # noqa: E402
from luminal.compiler.kernels import ir  # noqa: E402

GAP_S = 1.3e-6  # per kernel boundary inside a CUDA graph on an H100 (notes/gpu.md: Hazy Research, 2025)
COPY_BANDWIDTH = 3.0e12  # an H100 SXM's device-to-device copy, read + written (KINDS.md: measured ~3.0 TB/s)


def staged_bytes(prog) -> tuple[int, int]:
    """(GEMVs that compute a norm in their prologue, bytes all GEMV blocks read per run at batch 1 to stage
    their vectors): blocks x K x what the vector reads per element. These reads hit L2 (or L1), not HBM: each
    block reads the same vector; the figure shows what a fused norm adds to what the staging already read. A GEMV
    that runs after another in its blocks and finds the vector staged (compiler/gpu/gemv_batch.py) reads none."""
    env = {s: 1 for s in prog.kernels.symbols}
    fused, total = 0, 0
    for members, launch in planned_launches(prog.kernels):
        for part in gemv_batch.segments(members) if launch.shape == "gemvs" else [list(members)]:
            for j, k in enumerate(part):
                if not isinstance(k, ir.LoopKernel) or loop_shape(k) != "gemv" or not staged(k, gemv_plan.plan(k)):
                    continue
                gemv = gemv_plan.plan(k)
                fused += gemv.statistics
                if j and gemv_batch.shares_staging(part[j - 1], k):
                    continue
                (alone,) = kernel_launches(k, prog.kernels)
                per_block = gemv.reduction.extent.value * bytes_along(gemv.vector, gemv.reduction.var)
                total += alone.grid.evaluate(env) * per_block
    return fused, total


def traffic(prog, graph: lm.Graph) -> str:
    """The bytes the program's kernels read and write per run at the symbols' maxima (the roofline's count)
    and its planned arena: what storing activations in half (compile option activation_dtype) shrinks. A paged
    step's pool counts as the blocks its rows can hold, not the pool's declared maximum (16M blocks)."""
    env = None
    if "pool_blocks" in graph.symbols:
        env = {"pool_blocks": graph.symbols["batch"].hi * graph.symbols["row_blocks"].hi}
    cost = estimate_program(prog.kernels, prog.target, env)
    arena, derived = prog.report["memory"]["arena_bytes"], prog.report["memory"].get("derived_bytes", 0)
    once = f", {derived / 1e6:.1f} MB derived from the weights at load" if derived else ""
    moved = f"{cost.bytes_read / 1e6:.1f} MB read, {cost.bytes_written / 1e6:.1f} MB written"
    return f"{moved}, arena {arena / 1e6:.1f} MB{once}"


def report(name: str, graph: lm.Graph, target: str, sizes, activations: str = "auto") -> None:
    prog = lm.compile(graph.bind(zero_weights(graph)), target, cache=False, activation_dtype=activations)
    plan = launch_plan(prog.kernels)
    shapes = Counter(launch.shape for launch in plan)
    print(f"\n{name}: {len(prog.kernels.kernels)} kernels, {len(plan)} launches per run: {dict(shapes)}")
    print(f"  activations {activations}: {traffic(prog, graph)}")
    if name.startswith("decode"):
        weights, kv = decode_bytes(sizes, shapes_of(graph))
        floor, gaps = (weights + kv) / COPY_BANDWIDTH, len(plan) * GAP_S
        print(
            f"  at {COPY_BANDWIDTH / 1e12:.1f} TB/s the bytes take {floor * 1e3:.3f} ms; {len(plan)} kernel "
            f"boundaries at {GAP_S * 1e6:.1f} us add {gaps * 1e3:.3f} ms: at most "
            f"{floor / (floor + gaps):.0%} of the bandwidth, however fast each kernel"
        )
        fused, staged_total = staged_bytes(prog)
        print(
            f"  {fused} GEMVs compute their norm in the prologue; the GEMV blocks read {staged_total / 1e6:.1f} MB "
            f"per token (L2/L1) to stage their vectors, against {(weights + kv) / 1e6:.0f} MB from HBM"
        )
    if shutil.which("nvcc") is None:
        print("  nvcc not found: no register report")
        return
    from tests.compiler.cuda.nvcc import compile_cuda, wide_divisions

    kinds = {launch.kernel: launch.shape for launch in plan}
    per_shape: dict[str, list] = defaultdict(list)
    for usage in compile_cuda(prog.source):
        if usage.arch == "90" and usage.kernel in kinds:
            per_shape[kinds[usage.kernel]].append(usage)
    divisions = wide_divisions(prog.source)
    print(
        f"  {'shape':<12} {'kernels':>7} {'registers (max)':>16} {'spilled bytes':>14} {'shared bytes (max)':>19}"
        f" {'64-bit div/rem (max)':>21}"
    )
    for shape, usages in sorted(per_shape.items()):
        regs = max(u.registers for u in usages)
        spills = sum(u.spill_bytes for u in usages)
        smem = max(u.shared_bytes for u in usages)
        wide = max(divisions.get(u.kernel, 0) for u in usages)
        print(f"  {shape:<12} {len(usages):>7} {regs:>16} {spills:>14} {smem:>19} {wide:>21}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="the tiny configurations")
    parser.add_argument("--target", default="h100")
    parser.add_argument("--only", default="decode,decode-paged,prefill,encoder", help="programs, comma-separated")
    parser.add_argument("--activation-dtype", default="auto", help="the compile option: auto or float32 (before)")
    args = parser.parse_args()
    sizes = SMALL if args.small else FULL
    wanted = args.only.split(",")
    for name, graph in graphs(sizes).items():
        if name in wanted:
            report(name, graph, args.target, sizes, args.activation_dtype)


if __name__ == "__main__":
    main()
