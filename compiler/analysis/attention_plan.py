"""Whether an attention can run as one fused kernel: the backend-neutral test that recognition (the search) and
every attention generator (C: codegen_attention.py, CUDA: compiler/gpu/attention.py) share.

Flash decoding (compiler/gpu/flash_decode.py) is chosen here too: an attention with one query per row whose
key axis may be long is split over the keys, FLASH_KEYS per block, into partial results that a second kernel
combines; `partials` names the scratch buffer that holds them, live only at that kernel (compiler/analysis/memory.py).

Both generators size per-row blocks by the head dims (the C kernel's stack blocks, the CUDA kernel's shared query
row and per-thread output columns), so the dims must be known when the program is compiled, and bounded.
"""

from __future__ import annotations

from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.symbolic import Expr, as_expr
from luminal.view import dims_product

MAX_HEAD_DIM = 256  # q·k's and v's widths
LOG2_E = "0x1.71547652b82fep+0f"  # the softmax's exp(x) is exp2(x * log2 e), as the graph writes it


def fits(e_extent: Expr, n_extent: Expr) -> bool:
    """Whether the head dims are concrete and small enough for the generators' blocks."""
    return all(d.is_const and 1 <= int(d.lo) <= MAX_HEAD_DIM for d in (e_extent, n_extent))


FLASH_KEYS = 256  # keys per block of a split attention
FLASH_MIN_KEYS = 1024  # the key axis's upper bound from which an attention of single queries is split
PARTIAL_EXTRA = 2  # a partial result is the block's peak, its sum of exponentials, then its N unscaled outputs


def splits(k: ir.Kernel) -> Expr | None:
    """The number of key blocks a flash-decoding attention kernel runs (at the live dims), or None when `k` is
    not one: an attention whose query axis (the output's second to last) is 1 and whose key axis may reach
    FLASH_MIN_KEYS."""
    if not isinstance(k, ir.LoopKernel) or not isinstance(k.body, ir.Attend) or len(k.shape) < 2:
        return None
    keys = k.body.s_extent
    if as_expr(k.shape[-2]) != 1 or keys.hi < FLASH_MIN_KEYS:
        return None
    return (keys + (FLASH_KEYS - 1)) // FLASH_KEYS


def partials(k: ir.Kernel) -> str:
    return f"{k.name}_partials"


def partials_size(k: ir.LoopKernel) -> Expr:
    """Floats of the scratch buffer: a partial result per row and key block."""
    return dims_product(k.shape[:-1]) * splits(k) * (as_expr(k.shape[-1]) + PARTIAL_EXTRA)


def add_partials_buffers(program: ir.KernelProgram) -> ir.KernelProgram:
    """`program` with the scratch buffer of every flash-decoding attention (a temp labelled with its kernel)."""
    buffers = dict(program.buffers)
    for k in program.kernels:
        if splits(k) is not None:
            buffers[partials(k)] = ir.Buffer(partials(k), dt.float32, partials_size(k), "temp", k.name)
    return replace(program, buffers=buffers)
