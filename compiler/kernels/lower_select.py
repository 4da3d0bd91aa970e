"""`where` and its kin lowered as a select, not as the gather the primitive graph spells.

The primitive set has no select. `where(c, a, b)` (luminal/hl/comparison.py: `_choose`) stacks its candidates as
the rows of a [k, *shape] tensor (each candidate padded into its own row, the rows added) and gathers element
`flat(i) + choice(i) * size` of it, `flat(i)` being the output element's row-major position and `size` a row's.
Lowered literally, that stores k times the output and gathers from it, and nothing can be fused into the stack
(a gather's data is a buffer): an ELU after a GEMM took five kernels. Lowered as
`Apply("Select", (choice, row_0(i), .., row_{k-1}(i)))` it is element-wise: nothing is stored, and fusion treats
it as any other element-wise op (a GEMM's epilogue included).

The pattern is recognized on the graph being lowered, looking through `Inline` nodes (which only say where a
value is computed) and reads of whole tensors:
- the gathered data is a sum of reads, each of which can be nonzero in one row only (its padding is the rest);
- the index is `flat(i) + choice(i) * size`, and `choice` provably lies in [0, k): an interval over the nodes
  that compute it (a bool cast is 0 or 1), so the select reads exactly what the gather would have, and the
  gather's out-of-range error cannot happen.
Anything else stays a gather. The select is exact where the gather's rows added a zero: a -0.0 candidate keeps
its sign (as torch.where does; the reference's row sum gives +0.0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from luminal import dtypes as dt
from luminal import ops
from luminal.compiler.fusion.fuse import unflatten
from luminal.compiler.graph.fused_ops import Inline
from luminal.compiler.kernels import ir
from luminal.graph import Graph, Node
from luminal.symbolic import Expr, as_expr, const
from luminal.view import ShapeTracker, dims_product, idx

if TYPE_CHECKING:
    from luminal.compiler.kernels.lower import Lowering

MAX_ROWS = 8  # `where` stacks 2, nan_to_num 4: a select of more would be a long chain of comparisons
MAX_DEPTH = 16  # how deep the interval of a choice is looked for

Edge = tuple[int, ShapeTracker]  # a node read through a view


def select_of(lowering: Lowering, node: Node) -> ir.Value | None:
    """The Gather `node` as a select of its stacked rows, or None where it is not that pattern."""
    graph = lowering.graph
    (data, data_view), index = node.inputs
    shape = tuple(node.shape)
    k = as_expr(data_view.shape[0]) if data_view.shape else None
    if k is None or not k.is_const or not 2 <= k.value <= MAX_ROWS or tuple(data_view.shape[1:]) != shape:
        return None
    if not data_view.is_identity():
        return None
    rows = _rows(graph, (data, data_view), k.value)
    choice = _choice(graph, index, shape)
    if rows is None or choice is None:
        return None
    bounds = _interval(graph, choice, MAX_DEPTH)
    if bounds is None or bounds[0] < 0 or bounds[1] >= k.value:
        return None
    options = []
    for r, row in enumerate(rows):
        if row is None:
            options.append(ir.Const(False if node.dtype == dt.bool_ else 0, node.dtype))
            continue
        table = {"_i0": const(r), **{f"_i{m + 1}": idx(m, d) for m, d in enumerate(shape)}}
        options.append(lowering.read(*row, table))
    return ir.Apply("Select", (lowering.read(*choice), *options), node.dtype)


def _computed(graph: Graph, edge: Edge) -> Edge:
    """The node that computes what `edge` reads (past Inline nodes), with the view composed to read it."""
    src, view = edge
    while isinstance(graph.nodes[src].op, Inline):
        inner, inner_view = graph.nodes[src].inputs[0]
        src, view = inner, inner_view.then(view)
    return src, view


def _summed(graph: Graph, edge: Edge, found: list[Edge]) -> None:
    """The reads whose sum is what `edge` reads: through Adds read whole (for bools an or, which stacks rows
    as well). A read of an Inline node is kept as it is (it keeps the search's choice to compute that value in
    its reader)."""
    src, view = _computed(graph, edge)
    node = graph.nodes[src]
    if isinstance(node.op, ops.Add) and view.is_identity():
        for e in node.inputs:
            _summed(graph, e, found)
    else:
        found.append(edge)


def _rows(graph: Graph, data: Edge, k: int) -> list[Edge | None] | None:
    """For each row of the stack, the one summed read that can be nonzero there (None: no read can), or None
    when two can (a sum, not a stack)."""
    found: list[Edge] = []
    _summed(graph, data, found)
    rows: list[Edge | None] = [None] * k
    for read in found:
        for r in range(k):
            if read[1].valid.substitute({"_i0": const(r)}) == 0:
                continue
            if rows[r] is not None:
                return None
            rows[r] = read
    return rows


def _choice(graph: Graph, index: Edge, shape: tuple) -> Edge | None:
    """`choice` where `index` reads flat(i) + choice(i) * size (either order of either operation)."""
    src, view = _computed(graph, index)
    node = graph.nodes[src]
    if not isinstance(node.op, ops.Add) or not view.is_identity():
        return None
    flat, size = ShapeTracker.contiguous(shape).index, as_expr(dims_product(shape))
    for position, scaled in (node.inputs, node.inputs[::-1]):
        if _integer(graph, position) != flat:
            continue
        mul_src, mul_view = _computed(graph, scaled)
        mul = graph.nodes[mul_src]
        if not isinstance(mul.op, ops.Mul) or not mul_view.is_identity():
            continue
        for choice, row_size in (mul.inputs, mul.inputs[::-1]):
            if _integer(graph, row_size) == size:
                return choice
    return None


def _integer(graph: Graph, edge: Edge) -> Expr | None:
    """The symbolic value of an Iota or integer constant read through `edge`, over the reader's indices."""
    src, view = _computed(graph, edge)
    op = graph.nodes[src].op
    if view.valid != 1:
        return None
    if isinstance(op, ops.Constant) and op.dtype.is_int:
        return as_expr(int(op.value))
    if not isinstance(op, ops.Iota):
        return None
    extents = {f"_i{k}": as_expr(d) for k, d in enumerate(view.shape)}
    return op.expr.substitute(unflatten(view.index, tuple(op.shape), extents))


def _interval(graph: Graph, edge: Edge, depth: int) -> tuple[int, int] | None:
    """Bounds on every value `edge` reads, from the ops that compute it, or None where they are not known."""
    if depth <= 0:
        return None
    src, view = edge
    node = graph.nodes[src]
    op = node.op
    found: tuple[int, int] | None = None
    if node.dtype == dt.bool_:
        found = (0, 1)
    elif not node.dtype.is_int:
        return None
    elif isinstance(op, ops.Constant):
        found = (int(op.value), int(op.value))
    elif isinstance(op, (Inline, ops.Cast)):
        inner = _interval(graph, node.inputs[0], depth - 1)
        found = inner if inner is not None and _fits(inner, node.dtype) else None
    elif isinstance(op, (ops.Add, ops.Mul)):
        a, b = (_interval(graph, e, depth - 1) for e in node.inputs)
        if a is not None and b is not None:
            ends = [x + y for x in a for y in b] if isinstance(op, ops.Add) else [x * y for x in a for y in b]
            found = (min(ends), max(ends)) if _fits((min(ends), max(ends)), node.dtype) else None
    if found is None or view.valid == 1:
        return found
    return min(found[0], 0), max(found[1], 0)  # padding reads 0


def _fits(bounds: tuple[int, int], dtype: dt.DType) -> bool:
    """Whether `dtype` holds every value in `bounds` (outside it an op wraps, and the bounds are wrong)."""
    info = np.iinfo(dtype.np)
    return int(info.min) <= bounds[0] and bounds[1] <= int(info.max)
