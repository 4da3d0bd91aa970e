"""The static graph: primitive-op nodes whose inputs are (producer, view) edges.

Nodes are appended as ops are recorded, so creation order is a topological order. A node's output is a
contiguous buffer of `node.shape`; every consumer reads it through its own view (a ShapeTracker), which
is why movement ops never appear as nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from luminal import dtypes as dt
from luminal import ops
from luminal import padding as pad_rules
from luminal.dtypes import DType
from luminal.symbolic import Dim, Expr, SymbolicError, as_dim, as_expr
from luminal.view import ShapeError, ShapeTracker, format_shape

if TYPE_CHECKING:
    from luminal.tensor import Tensor

# Input, output and weight names reach URLs, API answers and safetensors headers; 256 is far above any real name.
MAX_NAME_CHARS = 256


class GraphError(ValueError):
    """The graph is inconsistent: unknown names, duplicate names, unbound weights, bad edges."""


@dataclass(frozen=True)
class Node:
    id: int
    op: ops.Op
    inputs: tuple[tuple[int, ShapeTracker], ...]
    shape: tuple[Dim, ...]
    dtype: DType

    def __repr__(self) -> str:
        srcs = ", ".join(f"%{i}" for i, _ in self.inputs)
        return f"%{self.id} = {self.op.name}({srcs}) -> {self.dtype.name}{format_shape(self.shape)}"


def _symbols_of(shape: Iterable[Dim]) -> dict[str, Expr]:
    found: dict[str, Expr] = {}

    def walk(e: Expr) -> None:
        if e.op == "var":
            found[e.args[0]] = e
        elif e.op != "const":
            for a in e.args:
                walk(a)

    for d in shape:
        walk(as_expr(d))
    return found


class Graph:
    """A model as a static graph of primitive ops (see `luminal.ops`), built through Tensors."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.inputs: dict[str, int] = {}
        self.weights: dict[str, int] = {}
        self.outputs: dict[str, int] = {}
        self.symbols: dict[str, Expr] = {}  # name -> the symbol, which carries its range
        self.weight_data: dict[str, np.ndarray] = {}
        # input name -> {dim: pad value}: the dims a batcher may pad (see `luminal.padding`)
        self.padding: dict[str, dict[int, pad_rules.PadValue]] = {}
        # output name -> input name: the output may be written into the caller's input array (see `donate`)
        self.donated: dict[str, str] = {}

    # ---- recording -----------------------------------------------------------------------------------
    def add(self, op: ops.Op, inputs: Sequence[tuple[int, ShapeTracker]] = ()) -> Node:
        """Record one op; its inputs are (node id, view of that node's buffer). Checks shapes and dtypes."""
        if len(inputs) != op.arity:
            raise ShapeError(f"{op.name}: takes {op.arity} inputs, got {len(inputs)}")
        for src, view in inputs:
            if not isinstance(src, int) or not 0 <= src < len(self.nodes):
                raise GraphError(f"{op.name}: input %{src} is not a node of this graph")
            if tuple(view.base) != tuple(self.nodes[src].shape):
                raise ShapeError(
                    f"{op.name}: view over {format_shape(view.base)} applied to %{src} of shape "
                    f"{format_shape(self.nodes[src].shape)}"
                )
            if isinstance(self.nodes[src].op, ops.Output):
                raise GraphError(f"{op.name}: an Output node cannot feed another op")
        if not isinstance(op, (ops.Cast, ops.Output)):
            for s, _ in inputs:
                dt.check_computable(self.nodes[s].dtype, op.name)
        shape, dtype = op.infer([v.shape for _, v in inputs], [self.nodes[s].dtype for s, _ in inputs])
        shape = tuple(as_dim(d) for d in shape)
        self._register_symbols(shape)
        for _, v in inputs:
            self._register_symbols(v.shape)
        node = Node(len(self.nodes), op, tuple((s, v) for s, v in inputs), shape, dtype)
        self.nodes.append(node)
        return node

    def _register_symbols(self, shape: Iterable[Dim]) -> None:
        for name, s in _symbols_of(shape).items():
            if name.startswith("_"):
                raise SymbolicError(f"index variable {name} escaped into a shape")
            have = self.symbols.get(name)
            if have is None:
                self.symbols[name] = s
            elif (have.lo, have.hi) != (s.lo, s.hi):
                raise SymbolicError(f"symbol {name!r} declared with range [{have.lo}, {have.hi}] and [{s.lo}, {s.hi}]")

    def _tensor(self, node: Node) -> Tensor:
        from luminal.tensor import Tensor

        return Tensor(self, node.id, ShapeTracker.contiguous(node.shape))

    def _check_name(self, name: str, table: dict[str, int], what: str) -> None:
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
            shown = f"{len(name)} characters" if isinstance(name, str) and name else repr(name)
            raise GraphError(
                f"{what} name must be a non-empty string of at most {MAX_NAME_CHARS} characters, got {shown:.80}"
            )
        if name in table:
            raise GraphError(f"{what} {name!r} is already defined")

    def input(
        self, name: str, shape: Sequence[Dim], dtype: Any = dt.float32, pad: Mapping[int, Any] | None = None
    ) -> Tensor:
        """A tensor supplied at every run; dims may be ints or symbols (`lm.sym`).

        `pad={dim: value}` lets a server pad that (symbolic) dim with `value` to batch requests of different
        lengths, like `torch.nn.utils.rnn.pad_sequence(padding_value=...)`: token ids with the pad id, an
        attention mask with 0. Declare it only where the model masks padded positions (see `luminal.padding`);
        output dims that are the same symbol are cut back to each request's length."""
        self._check_name(name, self.inputs, "input")
        shape = tuple(as_dim(d) for d in shape)
        pads = pad_rules.normalize(name, shape, dt.dtype_of(dtype), pad) if pad is not None else {}
        node = self.add(ops.Input(name, shape, dt.dtype_of(dtype)))
        self.inputs[name] = node.id
        if pads:
            self.padding[name] = pads
        return self._tensor(node)

    def declare_padding(self, name: str, pad: Mapping[int, Any]) -> None:
        """Declare (or replace) the pad values of an existing input, as `input(..., pad=)` does; an empty
        mapping removes them. For importers, which create inputs before they know the model masks them."""
        if name not in self.inputs:
            raise GraphError(f"declare_padding: the graph has no input {name!r:.80}")
        node = self.nodes[self.inputs[name]]
        pads = pad_rules.normalize(name, node.shape, node.dtype, pad)
        if pads:
            self.padding[name] = pads
        else:
            self.padding.pop(name, None)

    def weight(self, name: str, shape: Sequence[int], dtype: Any = dt.float32) -> Tensor:
        """A named parameter, bound with `bind` and stored in the graph file."""
        self._check_name(name, self.weights, "weight")
        if any(not isinstance(as_dim(d), int) for d in shape):
            raise ShapeError(f"weight {name!r}: shape {format_shape(shape)} must be concrete")
        node = self.add(ops.Weight(name, tuple(as_dim(d) for d in shape), dt.dtype_of(dtype)))
        self.weights[name] = node.id
        return self._tensor(node)

    def constant(self, value: float | int | bool, dtype: Any = None) -> Tensor:
        """A scalar tensor (shape ()); expand it to use it as a full tensor."""
        d = dt.dtype_of(dtype) if dtype is not None else dt.dtype_of(type(value))
        v = bool(value) if d == dt.bool_ else d.wrap(int(value)) if d.is_int else float(value)  # 300 as uint8: 44
        return self._tensor(self.add(ops.Constant(v, d)))

    def mark_output(self, name: str, t: Tensor) -> None:
        self._check_name(name, self.outputs, "output")
        if t.graph is not self:
            raise GraphError(f"output {name!r} belongs to another graph")
        node = self.add(ops.Output(name), [(t.node, t.st)])
        self.outputs[name] = node.id

    def donate(self, output: str, input: str) -> None:  # noqa: A002 - the input's name
        """Let runtimes write `output` into the array the caller passes as `input` and return that array: the
        caller gives the input up (a KV pool updated in place). Both must have one shape and dtype."""
        if output not in self.outputs or input not in self.inputs:
            raise GraphError(f"donate: the graph needs an output {output!r:.80} and an input {input!r:.80}")
        out, src = self.nodes[self.outputs[output]], self.nodes[self.inputs[input]]
        if tuple(out.shape) != tuple(src.shape) or out.dtype != src.dtype:
            raise ShapeError(
                f"donate: output {output!r} {format_shape(out.shape)} {out.dtype.name} differs from input "
                f"{input!r} {format_shape(src.shape)} {src.dtype.name}"
            )
        if input in self.donated.values() and self.donated.get(output) != input:
            raise GraphError(f"donate: input {input!r} is already donated to another output")
        self.donated[output] = input

    # ---- weights -------------------------------------------------------------------------------------
    def bind(self, mapping: Mapping[str, Any], strict: bool = False) -> Graph:
        """Attach weight values by name. Names the graph lacks are ignored unless `strict`."""
        for name, value in mapping.items():
            if name not in self.weights:
                if strict:
                    raise GraphError(f"bind: the graph has no weight {name!r}")
                continue
            node = self.nodes[self.weights[name]]
            arr = np.asarray(value)
            if tuple(arr.shape) != tuple(node.shape):
                raise ShapeError(
                    f"bind: weight {name!r} has shape {format_shape(node.shape)}, got {format_shape(arr.shape)}"
                )
            if arr.dtype != node.dtype.np:
                raise dt.DTypeError(f"bind: weight {name!r} is {node.dtype.name}, got {arr.dtype}")
            self.weight_data[name] = np.asarray(arr, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
        return self

    def unbound_weights(self) -> list[str]:
        return [n for n in self.weights if n not in self.weight_data]

    # ---- inspection ----------------------------------------------------------------------------------
    def tensor(self, name: str) -> Tensor:
        """The tensor of a named input or weight."""
        for table in (self.inputs, self.weights):
            if name in table:
                return self._tensor(self.nodes[table[name]])
        raise GraphError(f"the graph has no input or weight {name!r}")

    def consumers(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for s, _ in n.inputs:
                out[s].append(n.id)
        return out

    def display(self, format: str = "text") -> str:  # noqa: A002 - the natural name for the choice
        """The graph as readable text (default) or Graphviz DOT (`format="dot"`); printed and returned."""
        from luminal.display import to_dot, to_text

        out = to_dot(self) if format == "dot" else to_text(self)
        print(out)
        return out

    def __repr__(self) -> str:
        return (
            f"Graph({len(self.nodes)} nodes, inputs={list(self.inputs)}, "
            f"weights={len(self.weights)}, outputs={list(self.outputs)})"
        )

    # ---- creation helpers (torch.arange / full / zeros / ones take no tensor, so they hang off the graph)
    def arange(self, start: Dim, end: Dim | None = None, step: int = 1, dtype: Any = None) -> Tensor:
        from luminal.hl.creation import arange

        return arange(self, start, end, step, dtype)

    def full(self, shape: Sequence[Dim], value: float | int | bool, dtype: Any = None) -> Tensor:
        from luminal.hl.creation import full

        return full(self, shape, value, dtype)

    def zeros(self, shape: Sequence[Dim], dtype: Any = dt.float32) -> Tensor:
        return self.full(shape, 0, dtype)

    def ones(self, shape: Sequence[Dim], dtype: Any = dt.float32) -> Tensor:
        return self.full(shape, 1, dtype)
