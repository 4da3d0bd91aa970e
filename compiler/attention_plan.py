"""Whether an attention can run as one fused kernel: the backend-neutral test that recognition (the search) and
every attention generator (C: codegen_attention.py, CUDA: compiler/cuda/attention.py) share.

Both generators size per-row blocks by the head dims (the C kernel's stack blocks, the CUDA kernel's shared query
row and per-thread output columns), so the dims must be known when the program is compiled, and bounded.
"""

from __future__ import annotations

from luminal.symbolic import Expr

MAX_HEAD_DIM = 256  # q·k's and v's widths
LOG2_E = "0x1.71547652b82fep+0f"  # the softmax's exp(x) is exp2(x * log2 e), as the graph writes it


def fits(e_extent: Expr, n_extent: Expr) -> bool:
    """Whether the head dims are concrete and small enough for the generators' blocks."""
    return all(d.is_const and 1 <= int(d.lo) <= MAX_HEAD_DIM for d in (e_extent, n_extent))
