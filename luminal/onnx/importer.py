"""`load(model) -> luminal.Graph`: the walk over an ONNX graph, node by node, in its (topological) order.

Nodes whose inputs are all known at import are evaluated right away (constant folding) by translating them
into a scratch graph and running it with the reference interpreter, so the same translators serve both, and
shape arithmetic (Shape -> Gather -> Concat -> Reshape) resolves to plain numbers before it reaches the graph.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnx

import luminal as lm
from luminal.graph import Graph
from luminal.onnx import symbolic, types
from luminal.onnx.context import NodeContext, read_attributes
from luminal.onnx.errors import OnnxImportError, OnnxUnsupportedError
from luminal.onnx.registry import OPS
from luminal.onnx.scope import Scope
from luminal.padding import declare_masked_sequence_padding
from luminal.symbolic import DEFAULT_MAX, Dim, as_dim
from luminal.tensor import Tensor

DEFAULT_DOMAINS = ("", "ai.onnx")
# Folding evaluates values in numpy at import; past this many elements a value is left to the graph instead.
FOLD_LIMIT = 1 << 24
# Each retry lowers one symbol's maximum for good (symbolic.SymbolBound), so a model needs about one per symbol.
MAX_BOUND_RETRIES = 16
_SYMBOL = re.compile(r"[^A-Za-z0-9_]")


def load(model: Any, constant_inputs: Mapping[str, Any] | None = None) -> Graph:
    """Import an ONNX model (a path, bytes or an `onnx.ModelProto`) as a luminal graph.

    `constant_inputs` fixes graph inputs to the given arrays at import, for models that feed shape-deciding
    values (a Reshape's shape, a Slice's starts) as inputs rather than initializers.
    """
    from luminal.onnx import ops  # noqa: F401  (importing the translator modules fills the registry)

    proto = read_model(model)
    check_operators(proto.graph)
    opset = default_opset(proto)
    bounds: dict[str, int] = {}  # symbol -> the largest value for which the model is defined
    for _ in range(MAX_BOUND_RETRIES):
        try:
            return _Import(proto.graph, opset, dict(constant_inputs or {}), bounds).run()
        except symbolic.SymbolBound as found:
            bounds[found.symbol] = min(found.hi, bounds.get(found.symbol, found.hi))
    raise OnnxImportError(f"the symbols' ranges were narrowed {MAX_BOUND_RETRIES} times without settling")


def read_model(model: Any) -> onnx.ModelProto:
    """The ModelProto of a path, bytes or ModelProto, checked for structure; anything else is a clear error."""
    if isinstance(model, onnx.ModelProto):
        proto = model
        where = "model"
    elif isinstance(model, (bytes, bytearray)):
        proto, where = _parse(bytes(model), "bytes"), "bytes"
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise OnnxImportError(f"{path}: no such file")
        where = str(path)
        proto = _parse(path.read_bytes(), where)
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
            try:
                onnx.load_external_data_for_model(proto, str(path.parent))
            except Exception as e:
                raise OnnxImportError(f"{where}: external tensor data cannot be read ({e})") from None
    else:
        raise TypeError(f"onnx.load: expected a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    if not proto.HasField("graph") or proto.ir_version <= 0 or not proto.opset_import:
        raise OnnxImportError(f"{where}: not an ONNX model (no graph, IR version or opset)")
    if proto.functions:
        try:
            proto = onnx.inliner.inline_local_functions(proto)
        except Exception as e:
            raise OnnxImportError(f"{where}: its local functions cannot be inlined ({e})") from None
    try:
        onnx.checker.check_model(proto)
    except Exception as e:  # ValidationError, or a protobuf error on a damaged message
        raise OnnxImportError(f"{where}: not a valid ONNX model: {str(e).strip().splitlines()[0]}") from None
    return proto


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError on anything that is not a serialized ModelProto
        raise OnnxImportError(f"{where}: not an ONNX model (the protobuf cannot be parsed: {e})") from None
    return proto


def default_opset(proto: onnx.ModelProto) -> int:
    """The default domain's opset version; a model whose operators all come from other domains (the training
    optimizers) need not import it, and its translators are the current ones."""
    for o in proto.opset_import:
        if o.domain in DEFAULT_DOMAINS:
            return int(o.version)
    if all("." in op for op in operator_types(proto.graph)):  # other domains' operators are "domain.Name"
        return onnx.defs.onnx_opset_version()
    raise OnnxImportError("the model imports no version of the default ONNX operator set")


def check_operators(graph: onnx.GraphProto) -> None:
    """Refuse the model up front, naming every operator type it uses that the importer does not translate."""
    missing = sorted(operator_types(graph) - set(OPS))
    if missing:
        raise OnnxUnsupportedError(f"unsupported ONNX operator(s): {', '.join(missing)}", tuple(missing))


def operator_types(graph: onnx.GraphProto) -> set[str]:
    """Every operator type a graph uses, subgraphs (If branches, Loop and Scan bodies) included."""
    found = set()
    for n in graph.node:
        found.add(n.op_type if n.domain in DEFAULT_DOMAINS else f"{n.domain}.{n.op_type}")
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                found |= operator_types(sub)
    return found


def _symbol_name(param: str, taken: dict[str, str]) -> str:
    """A luminal symbol name for an ONNX dim_param (letters, digits and '_', starting with a letter)."""
    if param in taken:
        return taken[param]
    name = _SYMBOL.sub("_", param)[:60]
    name = name if name[:1].isalpha() else f"d{name}"
    base, k = name, 1
    while name in taken.values():
        name, k = f"{base}_{k}", k + 1
    taken[param] = name
    return name


class _Import:
    def __init__(
        self, graph: onnx.GraphProto, opset: int, constant_inputs: dict[str, Any], bounds: dict[str, int]
    ) -> None:
        self.onnx = graph
        self.bounds = bounds
        self.opset = opset
        self.constant_inputs = constant_inputs
        self.graph = Graph()
        self.scope = Scope(self.graph)
        self.symbols: dict[str, str] = {}

    def run(self) -> Graph:
        for init in self.onnx.initializer:
            self.scope.set_const(init.name, types.tensor_to_array(init, f"initializer {init.name!r}"))
        for value in self.onnx.sparse_initializer:
            raise OnnxUnsupportedError(f"sparse initializer {value.values.name!r} is not supported")
        unknown = set(self.constant_inputs) - {v.name for v in self.onnx.input}
        if unknown:
            raise OnnxImportError(f"constant_inputs names {sorted(unknown)}, which are not graph inputs")
        for value in self.onnx.input:
            if self.scope.defined(value.name):
                continue  # an initializer listed as an input too (IR < 4 style): its value is fixed
            self._input(value)
        for node in self.onnx.node:
            self._node(node)
        for value in self.onnx.output:
            self._output(value)
        # A masked sequence model (attention_mask [batch, seq]) may batch requests of different lengths.
        declare_masked_sequence_padding(self.graph)
        return self.graph

    # ---- graph inputs and outputs --------------------------------------------------------------------
    def _declared(self, value: onnx.ValueInfoProto, what: str) -> tuple[lm.DType, list[Dim] | None]:
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            raise OnnxUnsupportedError(f"{what} {value.name!r}: {kind or 'untyped'} values are not supported")
        tt = value.type.tensor_type
        dtype = types.to_luminal(tt.elem_type, f"{what} {value.name!r}")
        if not tt.HasField("shape"):
            return dtype, None
        dims: list[Dim] = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            else:
                param = d.dim_param or f"{value.name}_dim{k}"  # an unnamed unknown dim gets its own symbol
                name = _symbol_name(param, self.symbols)
                dims.append(lm.sym(name, max=self.bounds.get(name, DEFAULT_MAX)))
        return dtype, dims

    def _input(self, value: onnx.ValueInfoProto) -> None:
        dtype, dims = self._declared(value, "graph input")
        if value.name in self.constant_inputs:
            arr = np.asarray(self.constant_inputs[value.name])
            if arr.dtype != dtype.np or (dims is not None and len(dims) != arr.ndim):
                raise OnnxImportError(
                    f"constant input {value.name!r}: expected {dtype.name} of rank {len(dims or [])}, "
                    f"got {arr.dtype} of shape {arr.shape}"
                )
            self.scope.set_const(value.name, arr)
            return
        if dims is None:
            raise OnnxImportError(f"graph input {value.name!r} has no shape; luminal needs each input's rank")
        t = self.graph.input(value.name, dims, dtype)
        self.scope.set_tensor(value.name, t, frozenset([value.name]))

    def _output(self, value: onnx.ValueInfoProto) -> None:
        dtype, _ = self._declared(value, "graph output")
        t = self.scope.tensor(value.name)
        if t.dtype != dtype:
            raise OnnxImportError(f"graph output {value.name!r} is declared {dtype.name} but computes {t.dtype.name}")
        t.output(value.name)

    def _node(self, node: onnx.NodeProto) -> None:
        translate_node(node, self.scope, self.opset)


def translate_node(node: onnx.NodeProto, scope: Scope, opset: int) -> None:
    """Translate (or fold) one node into `scope`, defining its outputs there."""
    op = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
    entry = OPS.get(op)
    if entry is None:  # (check_operators refuses these up front; kept for subgraphs translated directly)
        raise OnnxUnsupportedError(f"unsupported ONNX operator(s): {op}", (op,))
    attrs = read_attributes(node)
    extra = sorted(set(attrs) - entry.attrs)
    if extra:
        raise OnnxUnsupportedError(f"{node.op_type}: attribute(s) {', '.join(extra)} not supported", (node.op_type,))
    present = [name for name in node.input if name]
    for name in present:
        if not scope.defined(name):
            raise OnnxImportError(f"{node.op_type} (node {node.name or '?'}): input {name!r} is not defined")
    has_subgraph = any(isinstance(v, onnx.GraphProto) for v in attrs.values())  # it may read outer values
    foldable = not has_subgraph and all(scope.const(n) is not None for n in present)
    known = [scope.const(n) if n else None for n in node.input]
    outs = None
    if foldable and any(symbolic.is_symbolic(v) for v in known):
        outs = symbolic.fold(node.op_type, attrs, known, opset)
    elif foldable and sum(scope.const(n).size for n in present) <= FOLD_LIMIT:
        outs = _fold(node, attrs, scope, opset)
    if outs is None:
        outs = _as_outputs(entry.translate(NodeContext(node, opset, scope, attrs)), node)
    used = present + [n for g in attrs.values() if isinstance(g, onnx.GraphProto) for n in _names_used(g)]
    sources = frozenset().union(*(scope.sources(n) for n in used if scope.defined(n)))
    for name, out in zip(node.output, outs):
        if not name:
            continue
        if out is None:
            raise OnnxUnsupportedError(f"{node.op_type}: output {name!r} is not produced", (node.op_type,))
        scope.set(name, out, sources)


def _fold(node: onnx.NodeProto, attrs: dict[str, Any], scope: Scope, opset: int) -> list[Any] | None:
    """Evaluate a node whose inputs are all known: translate it into a scratch graph and run that. None (the
    node then goes into the graph) when an output would exceed FOLD_LIMIT elements, so that a hostile or
    merely large Expand/Tile of a constant never allocates at import."""
    scratch = Scope(Graph())
    for name in node.input:
        if name:
            scratch.set_const(name, scope.const(name))
    outs = _as_outputs(OPS[node.op_type].translate(NodeContext(node, opset, scratch, attrs)), node)
    wanted = {f"out{k}": t for k, t in enumerate(outs) if isinstance(t, Tensor)}
    for t in wanted.values():
        size = as_dim(t.numel())
        if not isinstance(size, int) or size > FOLD_LIMIT:
            return None
    for label, t in wanted.items():
        t.output(label)
    results = lm.run(scratch.graph, {}) if wanted else {}
    return [results[f"out{k}"] if isinstance(t, Tensor) else t for k, t in enumerate(outs)]


def _names_used(graph: onnx.GraphProto) -> set[str]:
    """Every value name a subgraph's nodes read (outer values among them), nested subgraphs included."""
    names = set()
    for n in graph.node:
        names.update(i for i in n.input if i)
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                names |= _names_used(sub)
    return names


def run_subgraph(body: onnx.GraphProto, parent: Scope, opset: int, inputs: list[Any]) -> list[Any]:
    """Translate a subgraph (If branch, Scan or Loop body) once, its inputs bound to `inputs` (tensors or
    known arrays); names it does not define resolve in the enclosing scope. Returns its outputs' values."""
    child = Scope(parent.graph, parent)
    if len(inputs) != len(body.input):
        raise OnnxImportError(f"subgraph {body.name!r} takes {len(body.input)} inputs, got {len(inputs)}")
    for value, given in zip(body.input, inputs):
        child.set(value.name, given, frozenset())
    for init in body.initializer:
        child.set_const(init.name, types.tensor_to_array(init, f"initializer {init.name!r}"))
    for node in body.node:
        translate_node(node, child, opset)
    return [child.value(v.name) for v in body.output]


def _as_outputs(result: Any, node: onnx.NodeProto) -> list[Any]:
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(outs) < len(node.output):
        outs += [None] * (len(node.output) - len(outs))
    return outs
