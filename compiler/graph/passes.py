"""Deterministic passes: rewrites that always pay off, run before the search.

Each pass is one function Graph -> Graph (the pipeline lists them by name). None changes what the graph
computes on finite inputs; tests compare every pass with the reference interpreter on random graphs.
"""

from __future__ import annotations

import json

import numpy as np

from luminal import dtypes as dt
from luminal import ops
from luminal.compiler.graph.rebuild import Rebuilder
from luminal.graph import Graph
from luminal.view import ShapeTracker


def _is_signature(op: ops.Op) -> bool:
    return isinstance(op, ops.Input) and not isinstance(op, ops.Weight)


def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes no output depends on (inputs stay: they are the program's signature)."""
    live: set[int] = set()
    stack = list(graph.outputs.values())
    while stack:
        n = stack.pop()
        if n not in live:
            live.add(n)
            stack.extend(s for s, _ in graph.nodes[n].inputs)
    rb = Rebuilder(graph)
    for node in graph.nodes:
        if node.id in live or _is_signature(node.op):
            rb.copy(node)
    return rb.finish()


def _op_key(op: ops.Op) -> tuple[str, str]:
    # The JSON of the parameters tells 0.0 from -0.0 (which == would merge) and keeps keys hashable.
    return op.name, json.dumps(op.params(), sort_keys=True, default=str)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """One node for each distinct (op, parameters, inputs read through identical views)."""
    rb = Rebuilder(graph)
    seen: dict[tuple, int] = {}
    for node in graph.nodes:
        inputs = rb.inputs_of(node)
        if isinstance(node.op, (ops.Input, ops.Output)):
            rb.copy(node, inputs)
            continue
        key = (_op_key(node.op), tuple(inputs))
        if key in seen:
            rb.alias[node.id] = (seen[key], None)
        else:
            seen[key] = rb.copy(node, inputs)
    return rb.finish()


def broadcast_scalar(shape: tuple) -> ShapeTracker:
    st = ShapeTracker.contiguous(())
    return st.reshape((1,) * len(shape)).expand(shape) if shape else st


def _constant_of(rb: Rebuilder, src: int, view: ShapeTracker) -> ops.Constant | None:
    """The constant an edge reads, when it reads a Constant node without padding (padding reads 0)."""
    op = rb.new.nodes[src].op
    return op if isinstance(op, ops.Constant) and view.valid == 1 else None


def _scalar(value: np.ndarray, dtype: dt.DType) -> float | int | bool:
    if dtype == dt.bool_:
        return bool(value)
    if dtype.is_int:
        return int(value)
    return float(np.asarray(value).astype(np.float64 if dtype == dt.float64 else np.float32))


def fold_constants(graph: Graph) -> Graph:
    """An element-wise op of constants becomes one constant (its value computed by the op's reference)."""
    rb = Rebuilder(graph)
    for node in graph.nodes:
        inputs = rb.inputs_of(node)
        consts = [_constant_of(rb, s, v) for s, v in inputs]
        if isinstance(node.op, ops.ELEMENTWISE) and inputs and all(c is not None for c in consts):
            values = [np.array(c.value).astype(c.dtype.np) for c in consts]
            folded = ops.Constant(_scalar(node.op.reference(*values), node.dtype), node.dtype)
            rb.alias_to(node, rb.new.add(folded).id, broadcast_scalar(node.shape))
        else:
            rb.copy(node, inputs)
    return rb.finish()


def _identity_of(op: ops.Op, dtype: dt.DType) -> object:
    if isinstance(op, ops.Add):
        return False if dtype == dt.bool_ else 0
    return True if dtype == dt.bool_ else 1


def apply_identities(graph: Graph) -> Graph:
    """x + 0 = x, x * 1 = x, recip(recip(x)) = x (views compose; padding blocks it).

    Not log2(exp2(x)) = x: exp2 rounds, and formulas that compensate for that rounding need it kept (expm1 of
    3e-8 computes (u - 1) x / ln(u) with u = e^x, which the rewrite turned into u - 1: 2x off)."""
    rb = Rebuilder(graph)
    for node in graph.nodes:
        inputs = rb.inputs_of(node)
        op = node.op
        if isinstance(op, (ops.Add, ops.Mul)):
            for k in (0, 1):
                c = _constant_of(rb, *inputs[k])
                other_src, other_view = inputs[1 - k]
                if c is not None and c.value == _identity_of(op, node.dtype) and other_view.shape == node.shape:
                    rb.alias_to(node, other_src, other_view)
                    break
            else:
                rb.copy(node, inputs)
            continue
        inverse = {ops.Recip: ops.Recip}.get(type(op))
        if inverse is not None:
            src, view = inputs[0]
            inner = rb.new.nodes[src]
            if isinstance(inner.op, inverse) and view.valid == 1:
                inner_src, inner_view = inner.inputs[0]
                if inner_view.valid == 1:
                    rb.alias_to(node, inner_src, inner_view.then(view))
                    continue
        rb.copy(node, inputs)
    return rb.finish()


# The deterministic stages in the order the pipeline runs them.
PASSES = (
    ("dead-code", eliminate_dead_code),
    ("constant-folding", fold_constants),
    ("identities", apply_identities),
    ("common-subexpressions", eliminate_common_subexpressions),
    ("dead-code-final", eliminate_dead_code),
)
