"""An attention stored in the layout of the copy that is its one reader: no transposing kernel after it.

A prefill's or an encoder's attention computes [batch, heads, seq, head_dim], and its output projection reads
[batch, seq, heads * head_dim]. Fusion gives no GEMM an operand read through a view that splits its contraction
axis into heads (cuBLAS reads strided matrices), so a kernel copies each attention's output into that layout:
a launch per layer, and the output written and read once more. The CUDA attention runs a block per query row,
decoded from its flat index into the leading axes (compiler/gpu/attention.py), so it runs them in any order;
Metal runs the same body, a threadgroup per row (compiler/metal/), and gets this pass too.
So an attention whose output only such a copy reads now loops over the copy's order ([batch, seq, heads,
head_dim]) and stores into the copy's buffer, and the copy goes. The copy's order is found among the
permutations of the attention's leading axes: the one whose row-major position is where the copy reads.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from luminal.compiler.fusion.fuse import readers_of, substitute_indices, unflatten, with_kernels
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.bounded_index import fold
from luminal.symbolic import Expr, as_expr
from luminal.view import contiguous_strides, dims_product, idx


def _flat(indices: list[Expr], shape: tuple[Expr, ...]) -> Expr:
    total = as_expr(0)
    for i, stride in zip(indices, contiguous_strides(shape)):
        total = total + i * stride
    return total


def _order(attention: ir.LoopKernel, copy: ir.LoopKernel) -> tuple[int, ...] | None:
    """The order of the attention's leading axes in which the copy stores what it reads, or None."""
    lead = len(attention.shape) - 1
    for order in itertools.permutations(range(lead)):
        shape = (*(attention.shape[a] for a in order), attention.shape[-1])
        if dims_product(shape) != dims_product(copy.shape):
            continue
        new = [idx(m, d) for m, d in enumerate(shape)]
        extents = {f"_i{m}": as_expr(d) for m, d in enumerate(shape)}
        at = fold(copy.body.index.substitute(unflatten(_flat(new, shape), copy.shape)), extents)
        source = [new[order.index(a)] for a in range(lead)] + [new[-1]]
        if at == _flat(source, attention.shape):
            return order
    return None


def _reordered(attention: ir.LoopKernel, order: tuple[int, ...], out: str) -> ir.LoopKernel:
    """The attention looping over its leading axes in `order`, storing into `out`."""
    a: ir.Attend = attention.body
    shape = (*(attention.shape[axis] for axis in order), attention.shape[-1])
    table = {f"_i{axis}": idx(m, shape[m]) for m, axis in enumerate(order)}
    table[f"_i{len(order)}"] = idx(len(order), shape[-1])
    inner = {name: e for name, e in table.items() if name not in (a.s_var, a.e_var)}
    q, k, v, bias = (substitute_indices(x, inner) for x in (a.q, a.k, a.v, a.bias))
    body = replace(a, s_extent=a.s_extent.substitute(inner), e_extent=a.e_extent.substitute(inner), q=q, k=k, v=v,
                   bias=bias)  # fmt: skip
    return replace(attention, out=out, shape=shape, body=body)


def store_attentions_in_reader_layout(p: ir.KernelProgram) -> ir.KernelProgram:
    """`p` with each attention read only by a copy into another order of its axes storing in that order."""
    outputs = {buffer for buffer, _ in p.outputs.values()}
    readers = readers_of(p)
    kernels: list[ir.Kernel | None] = list(p.kernels)
    written = {k.out: j for j, k in enumerate(p.kernels)}
    for j, copy in enumerate(p.kernels):
        if not isinstance(copy, ir.LoopKernel) or not isinstance(copy.body, ir.Load):
            continue
        source = copy.body.buffer
        producer = p.kernels[written[source]] if source in written else None
        if not isinstance(producer, ir.LoopKernel) or not isinstance(producer.body, ir.Attend):
            continue
        if source in outputs or readers.get(source) != [j] or p.buffers[source].dtype != p.buffers[copy.out].dtype:
            continue
        order = _order(producer, copy)
        if order is None:
            continue
        kernels[written[source]], kernels[j] = _reordered(producer, order, copy.out), None
    if None not in kernels:
        return p
    return with_kernels(p, [k for k in kernels if k is not None])  # the attention's own buffer goes too
