"""Readable forms of a graph: one line per node as text, or Graphviz DOT.

    %3 = Add(%0 view(permute(1, 0)), %2) -> float32(4, b)

An edge shows its view only when it is not the producer's plain buffer, as the movement ops that built it
(`permute`, `reshape`, `expand`, `slice`, `pad`, `flip`), so a reader sees where data is rearranged.
"""

from __future__ import annotations

import json
import re
from typing import Any

from luminal import ops
from luminal.graph import Graph
from luminal.symbolic import SymbolicError, expr_from_json
from luminal.view import ShapeTracker, format_shape

# DOT node shapes by role: data enters at the top (inputs, weights), leaves at the bottom (outputs).
_PLAIN_NAME = re.compile(r"[\w.\-]+")  # names shown bare in the header; others are quoted
_DOT_SHAPES = {"Input": "invhouse", "Weight": "cylinder", "Output": "house", "Constant": "ellipse", "Iota": "ellipse"}


def to_text(graph: Graph) -> str:
    """The graph as text: a header naming inputs, weights, outputs and symbols, then one line per node."""
    lines = [
        "# inputs: " + _table(graph, graph.inputs),
        "# weights: " + _table(graph, graph.weights, graph.weight_data),
        "# outputs: " + _table(graph, graph.outputs),
    ]
    if graph.symbols:
        lines.append("# symbols: " + ", ".join(f"{n} in [{e.lo}, {e.hi}]" for n, e in sorted(graph.symbols.items())))
    for node in graph.nodes:
        args = []
        for src, view in node.inputs:
            moves = movements(view)
            args.append(f"%{src}" + (f" view({moves})" if moves else ""))
        lines.append(
            f"%{node.id} = {op_label(node.op)}({', '.join(args)}) -> {node.dtype.name}{format_shape(node.shape)}"
        )
    return "\n".join(lines)


def to_dot(graph: Graph) -> str:
    """The graph as Graphviz DOT: a box per node (op, shape, dtype), edges labelled with non-plain views."""
    out = ["digraph luminal {", "  rankdir=TB;", '  node [shape=box, fontname="Courier"];']
    for node in graph.nodes:
        label = "\\n".join(
            _dot_escape(s) for s in (f"%{node.id} {op_label(node.op)}", f"{node.dtype.name}{format_shape(node.shape)}")
        )
        shape = _DOT_SHAPES.get(node.op.name, "box")
        out.append(f'  n{node.id} [label="{label}", shape={shape}];')
    for node in graph.nodes:
        for src, view in node.inputs:
            moves = movements(view)
            attrs = f' [label="{_dot_escape(moves)}"]' if moves else ""
            out.append(f"  n{src} -> n{node.id}{attrs};")
    out.append("}")
    return "\n".join(out)


def op_label(op: ops.Op) -> str:
    """The op's name with the params its result line does not already show: `SumReduce[axis=1]`."""
    if isinstance(op, (ops.Input, ops.Output)):  # Weight is an Input
        return f"{op.name}[{json.dumps(op.label)}]"
    if isinstance(op, ops.Reduce):
        return f"{op.name}[axis={op.axis}]"
    if isinstance(op, ops.Iota):
        return f"{op.name}[{op.expr}]"
    if isinstance(op, ops.Constant):
        return f"{op.name}[{op.value!r}]"
    if isinstance(op, ops.Cast):
        return f"{op.name}[{op.dtype.name}]"
    return op.name


def movements(view: ShapeTracker) -> str:
    """The movement ops that built `view` from its buffer ("" for the buffer read as is)."""
    if view.shape == view.base and view.is_contiguous():
        return ""
    if not view.history:  # built without movement ops: show the index arithmetic itself
        return f"index={view.index}, valid={view.valid}"
    return " ".join(f"{name}({_args(name, args)})" for name, args in view.history)


def _args(name: str, args: Any) -> str:
    if name in ("permute", "flip"):
        return ", ".join(str(a) for a in args)
    if name in ("reshape", "expand"):
        return ", ".join(_dim(d) for d in args)
    if name == "slice":  # start:stop[:step] per axis, as Python writes it
        return ", ".join(f"{_dim(a)}:{_dim(b)}" + (f":{s}" if s != 1 else "") for a, b, s in args)
    if name == "pad":
        return ", ".join(f"({_dim(a)}, {_dim(b)})" for a, b in args)
    return str(args)


def _dim(data: Any) -> str:
    try:
        return str(expr_from_json(data))
    except SymbolicError:
        return str(data)


def _table(graph: Graph, table: dict[str, int], bound: dict | None = None) -> str:
    if not table:
        return "(none)"
    parts = []
    for name, node_id in table.items():
        node = graph.nodes[node_id]
        note = " (unbound)" if bound is not None and name not in bound else ""
        shown = name if _PLAIN_NAME.fullmatch(name) else json.dumps(name)
        parts.append(f"{shown}=%{node_id} {node.dtype.name}{format_shape(node.shape)}{note}")
    return ", ".join(parts)


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


__all__ = ["movements", "op_label", "to_dot", "to_text"]
