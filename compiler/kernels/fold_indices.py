"""Every kernel's indices folded by its loop extents where that removes a division or modulo by a symbol.

A view's reshape of a non-contiguous tensor (an attention output transposed back to [batch, seq, hidden], a
GEMM's output split into heads) and fusion's unflattening leave indices such as `(32*_i1 + _i2 % 32) // (32*seq)`,
which is 0 because `_i1 < seq`: the simplifier bounds variables by numbers only, so it keeps them. Each is an
integer division by a value known only at launch, computed at every element (and, in a GEMM's operand, at
every element of every tile). compiler/kernels/bounded_index.py folds them given the extents in scope. An index is
replaced only where the folded one holds fewer such divisions (elsewhere folding may only rearrange it), or is
a constant: a padded view's guard `i < n` in a loop that runs to n holds everywhere and is dropped, and the values
it guarded are then computed once into locals (compiler/renderer/render.py binds none inside a guard).

A GPU has no integer divider: each 64-bit division or modulo is a subroutine of dozens of instructions. The
bench's prefill attention computed 41 of them (in its PTX), most per key read; folded, none, at a cost in
registers (68 to 104 on sm_90), which an attention kernel can afford: four of its 128-thread blocks still fit
an SM's registers (bench/gpu_kernels.py prints both).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from luminal.compiler.kernels import ir
from luminal.compiler.kernels.bounded_index import axes_extents, fold, fold_value
from luminal.symbolic import Expr


def symbolic_divisions(e: Expr) -> int:
    """How many divisions and modulos by a non-constant the expression computes."""
    own = e.op in ("div", "mod") and not e.args[1].is_const
    return own + sum(symbolic_divisions(a) for a in e.args if isinstance(a, Expr))


def fewer_divisions(e: Expr, extents: Mapping[str, Expr]) -> Expr:
    """`e` folded by the extents in scope where that leaves fewer divisions by a symbol (or a constant), else `e`."""
    folded = fold(e, extents)
    return folded if folded.is_const or symbolic_divisions(folded) < symbolic_divisions(e) else e


def _folded(k: ir.Kernel) -> ir.Kernel:
    if isinstance(k, ir.LoopKernel):
        return replace(k, body=fold_value(k.body, axes_extents(k.shape), fewer_divisions))
    over_src, over_dest = axes_extents(k.src_shape), axes_extents(k.shape)
    at, src = (fold_value(v, over_src, fewer_divisions) for v in (k.at, k.src))
    return replace(k, at=at, src=src, dest=fold_value(k.dest, over_dest, fewer_divisions))


def fold_indices(program: ir.KernelProgram) -> ir.KernelProgram:
    """`program` with each index folded where that removes a division by a symbol (see the module docstring)."""
    return replace(program, kernels=[_folded(k) for k in program.kernels])
