"""Kernels computed from weights alone run once, when a program is loaded, instead of on every run.

A kernel that reads nothing but weights (and what other such kernels made) computes the same values every
run: a weight copied transposed into the layout a GEMM reads, widened to float32 for it, or rearranged. On
CUDA fusion computes nothing in a GEMM's operands, so such a copy stays a kernel: the prefill's logits
copied the whole of lm_head (131 MB read and 131 MB written at 1.1B) on every run. Here the buffer such a
kernel writes gets role `derived`: it is allocated once per loaded program, apart from the arena, and the
runtime runs the kernels that write derived buffers once after binding the weights (the CUDA and Metal
runtimes' load plans, the host shims' `lm_prepare`); the per-run launch plan and the cost model leave them out.
Marked on the chosen CUDA or Metal program only (compiler/program.py): candidates are ranked with these copies in
every run.

Only kernels whose buffers all have sizes known at compile time qualify (a derived buffer is allocated before
any dims are bound), and only where what they write is at most twice what they read (a float32 copy of a half
weight), so resident memory cannot grow past that for a broadcast.
"""

from __future__ import annotations

from dataclasses import replace

from luminal.compiler.kernels import ir
from luminal.compiler.kernels.hoist import depends_on
from luminal.compiler.storage.run_plan import DERIVED

ROLE = DERIVED  # the role's name is the artifact's (compiler/storage/run_plan.py)
SOURCES = ("weight", ROLE)  # the roles a kernel run at load may read


def at_load(k: ir.Kernel, buffers: dict[str, ir.Buffer]) -> bool:
    """Whether `k` runs once at load: what it writes is a derived buffer."""
    return buffers[k.out].role == ROLE


def buffer_bytes(buf: ir.Buffer) -> int:
    """A buffer's bytes; its size known at compile time (as a derived buffer's is)."""
    return int(buf.size.evaluate({})) * buf.dtype.itemsize


def _derivable(k: ir.Kernel, buffers: dict[str, ir.Buffer], dims: set[str], outputs: set[str]) -> bool:
    out = buffers[k.out]
    if out.role != "temp" or k.out in outputs:
        return False  # a program output is written into every run's arena
    if out.size.symbols() or any(e.symbols() for e in k.shape):
        return False
    if any(b.label == k.name for b in buffers.values()):
        return False  # a kernel with scratch of its own (flash decoding's partials, arrival counters)
    read = ir.buffers_read(k) - {k.out}
    if any(buffers[name].role not in SOURCES or buffers[name].size.symbols() for name in read):
        return False
    bodies = (k.body,) if isinstance(k, ir.LoopKernel) else (k.dest, k.at, k.src)
    extents = () if isinstance(k, ir.LoopKernel) else (*k.src_shape, k.limit)
    if any(depends_on(body, s) for body in bodies for s in dims) or any(e.symbols() for e in extents):
        return False  # reads at a dim bound at run time (a position, a bound)
    return buffer_bytes(out) <= 2 * sum(buffer_bytes(buffers[name]) for name in read)


def derived_bytes(program: ir.KernelProgram) -> int:
    """Bytes the derived buffers keep resident beside the weights (a weight only they read can be let go)."""
    return sum(buffer_bytes(b) for b in program.buffers.values() if b.role == ROLE)


def derive_at_load(program: ir.KernelProgram) -> ir.KernelProgram:
    """`program` with the buffer of every kernel computed from weights alone (in program order, so a chain of
    them qualifies) given role `derived`."""
    buffers, dims = dict(program.buffers), set(program.symbols)
    outputs = {buf for buf, _ in program.outputs.values()}
    for k in program.kernels:
        if _derivable(k, buffers, dims, outputs):
            buffers[k.out] = replace(buffers[k.out], role=ROLE, label=k.name)
    return replace(program, buffers=buffers)
