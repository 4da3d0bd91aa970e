"""The reference interpreter: runs any primitive graph with numpy. It defines what every program means.

Symbols are bound from the input arrays' shapes (or passed in `dims`); every view is read with the same
symbolic index and validity expressions that compiled kernels use, so a view bug shows up here first. A float
sum of products nothing else reads (a matmul) runs as one contraction (runtime/reference_contraction.py).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from luminal import ops
from luminal.graph import Graph, GraphError
from luminal.runtime import reference_contraction as contraction
from luminal.symbolic import SymbolicError, as_expr
from luminal.view import ShapeError, ShapeTracker, format_shape


class ExecutionError(ValueError):
    """An input or weight is missing, or has the wrong shape or dtype, or symbols disagree."""


def bind_symbols(
    graph: Graph, inputs: Mapping[str, np.ndarray], dims: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Solve every symbol from the input shapes; check each input against its declared shape and dtype."""
    env: dict[str, int] = dict(dims or {})
    missing = [n for n in graph.inputs if n not in inputs]
    if missing:
        raise ExecutionError(f"missing input(s) {missing}; the graph takes {list(graph.inputs)}")
    unknown = [n for n in inputs if n not in graph.inputs]
    if unknown:
        raise ExecutionError(f"unknown input(s) {unknown}; the graph takes {list(graph.inputs)}")
    checked = []
    for name, node_id in graph.inputs.items():
        node = graph.nodes[node_id]
        arr = inputs[name]
        if not isinstance(arr, np.ndarray):
            raise ExecutionError(f"input {name!r} must be a numpy array, got {type(arr).__name__}")
        if arr.dtype != node.dtype.np:
            raise ExecutionError(f"input {name!r} must be {node.dtype.name}, got {arr.dtype}")
        if arr.ndim != len(node.shape):
            raise ExecutionError(
                f"input {name!r} must have shape {format_shape(node.shape)}, got {format_shape(arr.shape)}"
            )
        for want, have in zip(node.shape, arr.shape):
            w = as_expr(want)
            if w.op == "var" and w.args[0] not in env:  # a bare symbol is solved by its first input
                if not w.lo <= have <= w.hi:
                    raise ExecutionError(
                        f"symbol {w.args[0]!r} = {have} (from input {name!r}) is outside [{w.lo}, {w.hi}]"
                    )
                env[w.args[0]] = have
            checked.append((name, w, have))
    for name, w, have in checked:  # every dim, constant or expression, must now agree with the arrays
        try:
            value = w.evaluate(env)
        except SymbolicError as e:
            raise ExecutionError(f"input {name!r}: dim {w} cannot be solved from the inputs ({e})") from None
        if value != have:
            decl = graph.nodes[graph.inputs[name]].shape
            raise ExecutionError(
                f"input {name!r} must have shape {format_shape(decl)}, got {format_shape(inputs[name].shape)}"
                + (f" (symbol values {env})" if env else "")
            )
    unbound = [s for s in graph.symbols if s not in env]
    if unbound:
        raise ExecutionError(f"symbol(s) {unbound} are not determined by the inputs; pass them in dims=")
    return env


def read_view(buf: np.ndarray, view: ShapeTracker, env: dict[str, int]) -> np.ndarray:
    """The logical tensor `view` describes over the contiguous buffer `buf`."""
    shape = tuple(int(as_expr(d).evaluate(env)) for d in view.shape)
    flat = buf.reshape(-1)
    if view.is_contiguous():
        return flat.reshape(shape)
    strided = view.strides()
    if strided is not None:
        strides, offset = strided
        st = [int(s.evaluate(env)) for s in strides]
        off = int(offset.evaluate(env))
        if all(s >= 0 for s in st) and off >= 0:
            item = flat.itemsize
            return np.lib.stride_tricks.as_strided(flat[off:] if flat.size else flat, shape, [s * item for s in st])
    # A dimension neither the index nor the validity reads is a broadcast: the gather runs with it at size 1 and
    # is expanded after (a (batch, seq, 384) activation read as (batch, seq, 384, 384) for a matmul gathers 1/384
    # of the elements; that one view was 6 of a MiniLM test's 30 seconds).
    read = view.index.symbols() | view.valid.symbols()
    n, grid_shape = len(shape), tuple(d if f"_i{k}" in read else 1 for k, d in enumerate(shape))
    grid = np.indices(grid_shape, dtype=np.int64) if n else np.zeros((0,), np.int64)
    values = {**env, **{f"_i{k}": grid[k] for k in range(n)}}
    index = np.broadcast_to(np.asarray(view.index.evaluate(values), np.int64), grid_shape)
    valid = np.broadcast_to(np.asarray(view.valid.evaluate(values), np.int64), grid_shape) != 0
    out = flat[np.where(valid, index, 0)] if flat.size else np.zeros(grid_shape, flat.dtype)
    return np.broadcast_to(np.where(valid, out, np.zeros((), flat.dtype)), shape)


def bound_weights(graph: Graph, weights: Mapping[str, np.ndarray] | None) -> Mapping[str, np.ndarray]:
    """The weights a compiled program of `graph` loads with (its own bound ones unless `weights` is given), every
    one present: the check each runtime's `load` makes before it touches a device."""
    weights = graph.weight_data if weights is None else weights
    unbound = [w for w in graph.weights if w not in weights]
    if unbound:
        raise ExecutionError(f"weight(s) {unbound[:8]} are not bound")
    return weights


def execute(graph: Graph, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Run the graph on numpy arrays; returns {output name: array}."""
    if not graph.outputs:
        raise GraphError("the graph has no outputs; mark one with tensor.output(name)")
    unbound = graph.unbound_weights()
    if unbound:
        raise ExecutionError(f"weight(s) {unbound[:8]} are not bound; call graph.bind(...) first")
    arrays = {k: np.asarray(v) if not isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    env = bind_symbols(graph, arrays, dims)
    needed = _live(graph)
    in_place = in_place_scatters(graph)
    # Sums of products run as one contraction (runtime/reference_contraction.py); a Mul only they read is never
    # written.
    contracted = {n.id for n in graph.nodes if n.id in needed and contraction.contracts(graph, n)}
    readers = graph.consumers()
    products = {graph.nodes[n].inputs[0][0] for n in contracted}
    products = {p for p in products if all(r in contracted or r not in needed for r in readers[p])}
    values: dict[int, np.ndarray] = {}
    deferred: list = []  # in-place scatters and their outputs: run after every other reader of their input
    for node in graph.nodes:
        if node.id not in needed or node.id in products:
            continue
        op = node.op
        if isinstance(op, ops.Weight):
            values[node.id] = graph.weight_data[op.label]
        elif isinstance(op, ops.Input):
            given = np.asarray(arrays[op.label], order="C")
            # A donated input is written where the caller holds it; one that cannot be written is copied first.
            donated = op.label in in_place.values()
            values[node.id] = np.array(given) if donated and not given.flags.writeable else given
        elif isinstance(op, (ops.Constant, ops.Iota)):
            values[node.id] = op.reference(env=env)
        elif node.id in in_place or (isinstance(op, ops.Output) and node.inputs[0][0] in in_place):
            deferred.append(node)
        elif node.id in contracted:
            product = graph.nodes[node.inputs[0][0]]
            a, b = (read_view(values[src], view, env) for src, view in product.inputs)
            values[node.id] = contraction.sum_of_products(a, b, op.axis, product.dtype.np)
        else:
            values[node.id] = _evaluate(node, values, env)
    # Other outputs are copied first: one may be a view of a donated input's old contents.
    results = {name: np.array(values[nid], copy=True) for name, nid in graph.outputs.items() if nid in values}
    for node in deferred:
        if isinstance(node.op, ops.Scatter):
            (dest, _), index, src = node.inputs
            args = [np.array(read_view(values[s], v, env)) for s, v in (index, src)]  # never views of `dest`
            values[node.id] = _scatter_into(values[dest], *args)
        else:
            results[node.op.label] = values[node.id] = values[node.inputs[0][0]]
    return {name: results[name] for name in graph.outputs}


def _evaluate(node, values: dict[int, np.ndarray], env: dict[str, int]) -> np.ndarray:
    args = [read_view(values[src], view, env) for src, view in node.inputs]
    out = node.op.reference(*args, env=env)
    return np.asarray(out, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)


def in_place_scatters(graph: Graph) -> dict[int, str]:
    """Scatter node id -> input name, for each scatter that may write its donated input in place: its
    destination is that input read whole, and its only reader is the output the input was donated to."""
    readers = graph.consumers()
    found = {}
    for output, source in graph.donated.items():
        out = graph.nodes[graph.outputs[output]]
        scatter_id, view = out.inputs[0]
        scatter = graph.nodes[scatter_id]
        if not isinstance(scatter.op, ops.Scatter) or not view.is_identity() or readers[scatter_id] != [out.id]:
            continue
        dest, dest_view = scatter.inputs[0]
        if dest == graph.inputs[source] and dest_view.is_identity():
            found[scatter_id] = source
    return found


def _scatter_into(dest: np.ndarray, indexes: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Scatter's meaning, written into `dest` itself (a donated input)."""
    flat = dest.reshape(-1)
    bad = (indexes < 0) | (indexes >= flat.size)
    if bad.any():
        raise IndexError(f"Scatter: index {int(indexes[bad].flat[0])} is out of range for {flat.size} elements")
    flat[indexes.reshape(-1)] = src.reshape(-1)
    return dest


def _live(graph: Graph) -> set[int]:
    live: set[int] = set()
    stack = list(graph.outputs.values())
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(s for s, _ in graph.nodes[n].inputs)
    return live


class ReferenceRuntime:
    """The runtime protocol over the interpreter: `load(program or graph, weights) -> executable with .run`."""

    name = "reference"

    def load(self, program, weights: Mapping[str, np.ndarray] | None = None) -> ReferenceExecutable:
        graph = program if isinstance(program, Graph) else program.graph
        if weights:
            graph.bind(weights)
        return ReferenceExecutable(graph)


class ReferenceExecutable:
    def __init__(self, graph: Graph):
        self.graph = graph

    def run(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        return execute(self.graph, inputs, dims)


__all__ = ["ExecutionError", "ReferenceRuntime", "ShapeError", "execute", "read_view"]
