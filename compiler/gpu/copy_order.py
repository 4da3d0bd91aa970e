"""A copy into a program output runs as early as its sources allow, where an element-wise kernel of the same
elements can share its launch.

A prefill writes each layer's value cache with a copy of that layer's value projection into the cache's layout;
lowered, the copies come after the last layer, one launch for all 16 (compiler/gpu/thread_batch.py). Each copy
keeps its layer's projection live until then: with each layer's q, k and v projections one GEMM's output
(compiler/gpu/sibling_gemms.py), 16 such outputs at once. A copy into an output can run anywhere after what it
reads is written (nothing reads an output it writes in the meantime), so it moves up to just after a thread kernel
over the same elements that runs after its sources are ready (the layer's key RoPE, which writes the key cache)
and that it is independent of, and the two run as one launch: no launch more, and each projection dies with its
layer's attention.
"""

from __future__ import annotations

from dataclasses import replace

from luminal.compiler.gpu.launch_runs import independent
from luminal.compiler.gpu.program import own_launches
from luminal.compiler.kernels import ir


def _thread(k: ir.Kernel, p: ir.KernelProgram, shapes: dict[str, str], kernel_launches) -> bool:
    """Whether `k` is a loop kernel launched as one thread per element."""
    if k.name not in shapes:
        launches = kernel_launches(k, p) if isinstance(k, ir.LoopKernel) else []
        shapes[k.name] = launches[0].shape if len(launches) == 1 else ""
    return shapes[k.name] == "thread"


def copies_beside_partners(p: ir.KernelProgram, kernel_launches=own_launches) -> ir.KernelProgram:
    """`p` with each thread kernel into an output moved up beside a partner (see the module docstring).
    `kernel_launches(k, p)` is the backend's launch planner (CUDA's: compiler/cuda/program.py)."""
    outputs = {buf for buf, _ in p.outputs.values()} - set(p.inputs.values())  # none written in place
    kernels, shapes, paired = list(p.kernels), {}, set()
    for copy in p.kernels:
        if copy.out not in outputs or not _thread(copy, p, shapes, kernel_launches):
            continue
        at, reads = kernels.index(copy), ir.buffers_read(copy)
        ready = max((j for j in range(at) if kernels[j].out in reads), default=-1)
        for j in range(ready + 1, at):  # the earliest: what the copy reads dies soonest
            partner = kernels[j]
            if (
                partner.name in paired
                or not _thread(partner, p, shapes, kernel_launches)
                or partner.shape != copy.shape
            ):
                continue
            if independent(copy, [partner]) and independent(partner, [copy]):
                kernels.insert(j + 1, kernels.pop(at))
                paired |= {partner.name, copy.name}
                break
    return replace(p, kernels=kernels)
