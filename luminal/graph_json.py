"""The graph structure as plain JSON (`graph.json` inside a `.lgraph` file), and back.

Decoding treats the JSON as hostile. Nothing in it is evaluated or imported: op names select a class from
`ops.BY_NAME`, views are rebuilt by replaying their checked movement ops (`ShapeTracker.from_json`), and every
node is re-recorded through the Graph API, so shapes and dtypes are re-inferred and compared with what the
file claims. Every defect raises `GraphFileError` with a message naming the node and the problem.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from luminal import dtypes as dt
from luminal import ops
from luminal.dtypes import DType
from luminal.graph import Graph, GraphError, Node
from luminal.padding import check_padding, input_pad_json, output_dims
from luminal.symbolic import SymbolicError, as_dim, as_expr, expr_from_json, sym
from luminal.tensor import Tensor
from luminal.view import ShapeError, ShapeTracker, format_shape, idx

# A large language model lowers to ~10^5 primitive nodes; ten times that bounds decode time and memory.
MAX_NODES = 1_000_000
# Expressions nest at most 64 deep (`expr_from_json`) inside ~8 levels of node structure; the check runs
# before parsing, so a hostile file cannot drive the parser (or our walkers) into deep recursion.
MAX_JSON_DEPTH = 96
# Views are capped at 16 dims by `ShapeTracker.from_json`; shapes in params get a looser cap that still bounds
# the work a single node can ask for.
MAX_RANK = 64

NODE_KEYS = {"id", "op", "params", "inputs", "shape", "dtype"}
GRAPH_KEYS = {"nodes", "inputs", "weights", "outputs", "symbols"}
_INDEX_VAR = re.compile(r"_i(\d+)")
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NON_FINITE = ("inf", "-inf", "nan")  # how `Constant.params` writes values JSON has no literal for


class GraphFileError(ValueError):
    """A `.lgraph` file is malformed, inconsistent or hostile; the message names the defect."""


# ---- JSON text -----------------------------------------------------------------------------------------


def dump_json(data: Any) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, no NaN/Infinity extensions."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # parsers disagree on which duplicate wins: a way to smuggle a second meaning
        seen = [k for k, _ in pairs]
        raise GraphFileError(f"duplicate key {next(k for k in seen if seen.count(k) > 1)!r:.60}")
    return out


def _reject_constant(name: str) -> Any:
    raise GraphFileError(f"non-standard JSON constant {name}")


def json_depth(data: bytes) -> int:
    """The deepest nesting of [ and { outside strings, computed without recursion."""
    skeleton = np.frombuffer(_JSON_STRING.sub(b"", data), np.uint8)
    brackets = skeleton[np.isin(skeleton, np.frombuffer(b"[{]}", np.uint8))]
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1).astype(np.int32)
    return int(np.cumsum(steps).max()) if steps.size else 0


def parse_json(data: bytes, what: str) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GraphFileError(f"{what} is not UTF-8 ({e.reason} at byte {e.start})") from None
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise GraphFileError(f"{what} nests JSON {depth} levels deep, over the limit of {MAX_JSON_DEPTH}")
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except GraphFileError as e:
        raise GraphFileError(f"{what}: {e}") from None
    except ValueError as e:  # JSONDecodeError, and ints too long to convert
        raise GraphFileError(f"{what} is not valid JSON: {e}") from None


def expect_keys(data: Any, keys: set[str], what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise GraphFileError(f"{what} must be a JSON object, got {type(data).__name__}")
    if set(data) != keys:
        missing, extra = sorted(keys - set(data)), sorted(set(data) - keys)
        raise GraphFileError(f"{what} has the wrong keys (missing {missing}, unexpected {extra})")
    return data


# ---- encoding ------------------------------------------------------------------------------------------


def shape_json(shape) -> list[Any]:
    return [as_expr(d).to_json() for d in shape]


def symbol_table(graph: Graph) -> dict[str, dict[str, int]]:
    return {name: {"min": e.lo, "max": e.hi} for name, e in sorted(graph.symbols.items())}


def signature(graph: Graph) -> dict[str, list[dict[str, Any]]]:
    """Names, shapes (symbolic dims as JSON) and dtypes of the inputs and outputs, in declaration order. A graph
    with padding declarations adds "pad" to its padded inputs and "unpad" to the outputs whose dims follow them
    (see `luminal.padding`; raises PaddingError for a declaration the graph cannot honour)."""
    padded = check_padding(graph)

    def entry(name: str, node_id: int) -> dict[str, Any]:
        node = graph.nodes[node_id]
        return {"name": name, "shape": shape_json(node.shape), "dtype": node.dtype.name}

    def input_entry(name: str, node_id: int) -> dict[str, Any]:
        pads = graph.padding.get(name)
        return {**entry(name, node_id), "pad": input_pad_json(pads)} if pads else entry(name, node_id)

    def output_entry(name: str, node_id: int) -> dict[str, Any]:
        follows = output_dims(graph, name, padded) if padded else []
        return {**entry(name, node_id), "unpad": follows} if follows else entry(name, node_id)

    return {
        "inputs": [input_entry(n, i) for n, i in graph.inputs.items()],
        "outputs": [output_entry(n, i) for n, i in graph.outputs.items()],
    }


def encode_graph(graph: Graph, check: bool = True) -> dict[str, Any]:
    """graph.json's content. Raises GraphError for what the loader would reject, so a save never writes
    a file that cannot be read back (`check=False` skips that: for a fingerprint, which is never read)."""
    plain: dict[tuple, ShapeTracker] = {}
    nodes = [_encode_node(n, plain) for n in graph.nodes]
    try:
        if check:
            _check_symbols(nodes)
            for raw in nodes:
                _decode_op(ops.BY_NAME[raw["op"]], raw["params"])
    except GraphFileError as e:
        raise GraphError(f"cannot save: the file could not be read back: {e}") from None
    encoded = {
        "nodes": nodes,
        "inputs": dict(graph.inputs),
        "weights": dict(graph.weights),
        "outputs": dict(graph.outputs),
        "symbols": symbol_table(graph),
    }
    if graph.donated:  # only then: files and fingerprints of graphs without donations are unchanged
        encoded["donated"] = dict(graph.donated)
    return encoded


def _encode_node(node: Node, plain: dict[tuple, ShapeTracker]) -> dict[str, Any]:
    for src, view in node.inputs:
        # A view is stored as the movement ops that built it; one built otherwise must be the plain view.
        if not view.history and view.base not in plain:
            plain[view.base] = ShapeTracker.contiguous(view.base)
        if not view.history and view != plain[view.base]:
            raise GraphError(f"cannot save: %{node.id} reads %{src} through {view}, which no movement ops built")
    return {
        "id": node.id,
        "op": node.op.name,
        "params": node.op.params(),
        "inputs": [[src, view.to_json()] for src, view in node.inputs],
        "shape": shape_json(node.shape),
        "dtype": node.dtype.name,
    }


# ---- decoding ------------------------------------------------------------------------------------------


def decode_graph(data: Any) -> Graph:
    """Rebuild a Graph from parsed graph.json, checking everything (see the module docstring)."""
    expect_keys(data, GRAPH_KEYS | ({"donated"} & set(data) if isinstance(data, dict) else set()), "graph.json")
    nodes = data["nodes"]
    if not isinstance(nodes, list):
        raise GraphFileError("graph.json: 'nodes' must be a list")
    if len(nodes) > MAX_NODES:
        raise GraphFileError(f"graph.json has {len(nodes)} nodes, over the limit of {MAX_NODES}")
    for i, raw in enumerate(nodes):
        expect_keys(raw, NODE_KEYS, f"node {i}")
        if raw["id"] != i or isinstance(raw["id"], bool):
            raise GraphFileError(f"node {i} has id {raw['id']!r:.40}: ids must number the nodes in order")
    _check_edges(nodes)
    _check_symbols(nodes)
    graph = Graph()
    views: dict[str, ShapeTracker] = {}  # models repeat a few views many times; replaying is the slow part
    for i, raw in enumerate(nodes):
        _record(graph, i, raw, views)
    for key in ("inputs", "weights", "outputs"):
        if data[key] != getattr(graph, key):
            raise GraphFileError(f"graph.json: the {key} table {data[key]!r:.200} disagrees with the nodes")
    if data["symbols"] != symbol_table(graph):
        raise GraphFileError(
            f"symbol range conflict: graph.json declares {data['symbols']!r:.200} "
            f"but its shapes use {symbol_table(graph)!r:.200}"
        )
    donated = data.get("donated", {})
    if not isinstance(donated, dict) or not all(isinstance(v, str) for v in donated.values()):
        raise GraphFileError("graph.json: 'donated' must map output names to input names")
    for output, source in donated.items():
        try:
            graph.donate(output, source)
        except (GraphError, ShapeError) as e:
            raise GraphFileError(f"graph.json: {e}") from None
    return graph


def _check_edges(nodes: list[dict[str, Any]]) -> None:
    """Each edge names an existing, earlier node: creation order is the topological order."""
    sources: list[list[int]] = []
    for i, raw in enumerate(nodes):
        if not isinstance(raw["inputs"], list):
            raise GraphFileError(f"node {i}: 'inputs' must be a list of [node id, view]")
        ids = []
        for edge in raw["inputs"]:
            if not isinstance(edge, list) or len(edge) != 2 or type(edge[0]) is not int:
                raise GraphFileError(f"node {i}: malformed edge {edge!r:.80}; expected [node id, view]")
            if not 0 <= edge[0] < len(nodes):
                raise GraphFileError(f"node {i}: dangling edge to node {edge[0]}, which does not exist")
            ids.append(edge[0])
        sources.append(ids)
    for i, ids in enumerate(sources):
        later = [j for j in ids if j >= i]
        if later:
            cycle = _find_cycle(sources, i)
            if cycle:
                raise GraphFileError("cycle in the graph: " + " reads ".join(f"%{k}" for k in cycle))
            raise GraphFileError(
                f"node {i} reads node {later[0]}, which comes later: edges must point to earlier nodes"
            )


def _find_cycle(sources: list[list[int]], start: int) -> list[int] | None:
    """A path start.. -> back to a node on it, following 'reads' edges (iterative DFS), or None."""
    state = {start: 1}  # 1: on the current path, 2: finished
    path, stack = [start], [iter(sources[start])]
    while stack:
        nxt = next(stack[-1], None)
        if nxt is None:
            state[path.pop()] = 2
            stack.pop()
        elif state.get(nxt) == 1:
            return path[path.index(nxt) :] + [nxt]
        elif nxt not in state:
            state[nxt] = 1
            path.append(nxt)
            stack.append(iter(sources[nxt]))
    return None


def _check_symbols(nodes: list[dict[str, Any]]) -> None:
    """Every symbol in the file has a legal name (names reach generated C) and one range everywhere.

    Index variables `_iN` may appear only in Iota expressions: smuggled into a view they would alias the
    view's own axes, and bounds checked against the declared range would not hold at run time.
    """
    seen: dict[str, tuple[int, int]] = {}
    checked: set[tuple[Any, ...]] = set()  # (name, lo, hi, allow_index) already found legal: a large graph repeats them

    def walk(obj: Any, where: str, allow_index: bool) -> None:
        # Iterative, and scalars are never pushed: a 12-layer encoder's file holds ~75,000 JSON values.
        stack = [(obj, allow_index)]
        while stack:
            item, allow = stack.pop()
            if type(item) is dict:
                stack.extend((v, allow and k == "expr") for k, v in item.items() if type(v) in (list, dict))
            elif type(item) is list:
                if len(item) == 4 and item[0] == "var" and isinstance(item[1], str):
                    note(item, where, allow)
                else:
                    stack.extend((x, allow) for x in item if type(x) in (list, dict))

    def note(v: list[Any], where: str, allow_index: bool) -> None:
        name, lo, hi = v[1], v[2], v[3]
        key = (name, lo, hi, allow_index) if type(lo) is int and type(hi) is int else None  # else: checked below
        if key in checked:
            return
        if _INDEX_VAR.fullmatch(name) and allow_index:
            return  # checked against the Iota's shape when the op is decoded
        try:
            sym(name, lo, hi)
        except (SymbolicError, TypeError, ValueError) as e:
            raise GraphFileError(f"{where}: bad symbol {name!r:.70}: {e}") from None
        if seen.setdefault(name, (lo, hi)) != (lo, hi):
            raise GraphFileError(f"symbol range conflict: {name!r} is declared in {list(seen[name])} and [{lo}, {hi}]")
        if key is not None:
            checked.add(key)

    for i, raw in enumerate(nodes):
        walk(raw["params"], f"node {i}", raw["op"] == "Iota")
        walk(raw["inputs"], f"node {i}", False)
        walk(raw["shape"], f"node {i}", False)


def _record(graph: Graph, i: int, raw: dict[str, Any], views: dict[str, ShapeTracker]) -> None:
    cls = ops.BY_NAME.get(raw["op"]) if isinstance(raw["op"], str) else None
    if cls is None:
        raise GraphFileError(f"node {i}: unknown op {raw['op']!r:.60}")
    where = f"node {i} ({cls.name})"
    if len(raw["inputs"]) != cls.arity:
        raise GraphFileError(f"{where}: wrong arity: takes {cls.arity} inputs, got {len(raw['inputs'])}")
    try:
        op = _decode_op(cls, raw["params"])
        edges = [(src, _view(view, views)) for src, view in raw["inputs"]]
        node = _add(graph, op, edges)
        shape, dtype = _shape(raw["shape"]), _dtype(raw["dtype"])
    except (ValueError, TypeError, ArithmeticError, LookupError) as e:
        # GraphFileError and the Graph's own ShapeError, GraphError, SymbolicError, DTypeError among them
        raise GraphFileError(f"{where}: {e}") from None
    if shape != node.shape:
        raise GraphFileError(
            f"{where}: shape lie: graph.json records {format_shape(shape)} but the op gives {format_shape(node.shape)}"
        )
    if dtype != node.dtype:
        raise GraphFileError(f"{where}: dtype lie: graph.json records {dtype.name} but the op gives {node.dtype.name}")


def _view(data: Any, cache: dict[str, ShapeTracker]) -> ShapeTracker:
    key = repr(data)  # parsed JSON: repr tells every value and type apart, at C speed (dumping cost 3x)
    if key not in cache:
        cache[key] = ShapeTracker.from_json(data)  # immutable, so one instance can serve every edge
    return cache[key]


def _add(graph: Graph, op: ops.Op, edges: list[tuple[int, ShapeTracker]]) -> Node:
    """Record through the public API where it has more checks (names, concrete weight shapes)."""
    if isinstance(op, ops.Weight):
        graph.weight(op.label, op.shape, op.dtype)
    elif isinstance(op, ops.Input):
        graph.input(op.label, op.shape, op.dtype)
    elif isinstance(op, ops.Output):
        (src, view), *_ = edges  # mark_output checks the edge through Graph.add
        graph.mark_output(op.label, Tensor(graph, src, view))
    else:
        graph.add(op, edges)
    return graph.nodes[-1]


def _decode_op(cls: type[ops.Op], params: Any) -> ops.Op:
    expect_keys(params, set(cls().params()), "params")  # a default instance lists the keys its op writes
    if cls in (ops.Input, ops.Weight):
        return cls(_label(params["label"]), _shape(params["shape"]), _dtype(params["dtype"]))
    if cls is ops.Output:
        return cls(_label(params["label"]))
    if issubclass(cls, ops.Reduce):
        if type(params["axis"]) is not int:
            raise GraphFileError(f"axis must be an int, got {params['axis']!r:.40}")
        return cls(params["axis"])
    if cls is ops.Cast:
        return cls(_dtype(params["dtype"]))
    if cls is ops.Constant:
        return _constant(params["value"], _dtype(params["dtype"]))
    if cls is ops.Iota:
        return _iota(params)
    return cls()  # the element-wise ops, Gather and Scatter have no params


def _dtype(name: Any) -> DType:
    if not isinstance(name, str) or name not in dt.BY_NAME:
        raise GraphFileError(f"unknown dtype {name!r:.40}; supported: {', '.join(dt.BY_NAME)}")
    return dt.BY_NAME[name]


def _label(label: Any) -> str:
    if not isinstance(label, str):
        raise GraphFileError(f"label must be a string, got {type(label).__name__}")
    return label


def _shape(dims: Any) -> tuple:
    if not isinstance(dims, list) or len(dims) > MAX_RANK:
        raise GraphFileError(f"a shape must be a list of at most {MAX_RANK} dims, got {dims!r:.80}")
    return tuple(as_dim(expr_from_json(d)) for d in dims)


def _constant(value: Any, dtype: DType) -> ops.Constant:
    if dtype == dt.bool_:
        ok = isinstance(value, bool)
    elif dtype.is_int:
        ok = type(value) is int and dtype.min <= value <= dtype.max
    elif isinstance(value, str):
        ok = value in _NON_FINITE
        value = float(value) if ok else value
    else:
        ok = isinstance(value, float) and math.isfinite(value)  # a JSON 1e999 parses as inf: not allowed
    if not ok:
        raise GraphFileError(
            f"constant {value!r:.40} is not a valid {dtype.name} value "
            f"(floats are finite numbers or one of {list(_NON_FINITE)})"
        )
    return ops.Constant(value, dtype)


def _iota(params: dict[str, Any]) -> ops.Iota:
    shape = _shape(params["shape"])
    for name, lo, hi in _vars_in(params["expr"]):  # before building: simplifying trusts the declared ranges
        found = _INDEX_VAR.fullmatch(name)
        if found is None:
            continue  # a symbol, checked by _check_symbols
        k = int(found.group(1))
        axis = idx(k, shape[k]) if k < len(shape) else None
        if axis is None or (lo, hi) != (axis.lo, axis.hi):
            raise GraphFileError(f"index variable {name} in [{lo}, {hi}] does not fit shape {format_shape(shape)}")
    return ops.Iota(expr_from_json(params["expr"]), shape, _dtype(params["dtype"]))


def _vars_in(data: Any):
    """The (name, lo, hi) of each variable in an expression's JSON form (nesting is already bounded)."""
    if isinstance(data, list) and data:
        if data[0] == "var" and len(data) == 4:
            yield data[1], data[2], data[3]
        else:
            for arg in data[1:]:
                yield from _vars_in(arg)


__all__ = ["GraphFileError", "MAX_JSON_DEPTH", "MAX_NODES", "decode_graph", "encode_graph", "parse_json", "signature"]
