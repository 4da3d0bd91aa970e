"""The values of one import: ONNX value name -> a luminal tensor, or an array known at import, or both.

Known values (initializers, Constant nodes, and everything computed from them alone) stay numpy arrays so
that shape-deciding inputs can be read; they enter the graph only when an op needs them as tensors: a
single element as a Constant node, anything larger as a named weight bound to its data.
"""

from __future__ import annotations

import re

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
from luminal.graph import Graph
from luminal.hl import prim
from luminal.onnx import symbolic
from luminal.onnx.errors import OnnxImportError
from luminal.onnx.types import check_array
from luminal.symbolic import as_expr
from luminal.tensor import Tensor

_WEIGHT_NAME = re.compile(r"^.{1,256}$", re.S)


class Scope:
    """Values by name; a subgraph's scope falls back to its parent's for names it does not define."""

    def __init__(self, graph: Graph, parent: Scope | None = None) -> None:
        self.graph = graph
        self.parent = parent
        self._tensors: dict[str, Tensor] = {}
        self._consts: dict[str, np.ndarray] = {}
        self._sources: dict[str, frozenset[str]] = {}  # graph inputs each value depends on (for errors)

    def set_tensor(self, name: str, t: Tensor, sources: frozenset[str]) -> None:
        self._tensors[name] = t
        self._sources[name] = sources

    def set_const(self, name: str, value: np.ndarray) -> None:
        value = np.asarray(value)
        if value.dtype == object:  # shape arithmetic on symbolic dims (see symbolic.py)
            value = symbolic.simplified(value)
        self._consts[name] = value if value.dtype == object else check_array(value, f"value {name!r}")
        self._sources[name] = frozenset()

    def set(self, name: str, value: Tensor | np.ndarray, sources: frozenset[str]) -> None:
        if isinstance(value, Tensor):
            self.set_tensor(name, value, sources)
        else:
            self.set_const(name, value)

    def _own(self, name: str) -> bool:
        return name in self._tensors or name in self._consts

    def defined(self, name: str) -> bool:
        return self._own(name) or (self.parent is not None and self.parent.defined(name))

    def const(self, name: str) -> np.ndarray | None:
        if self._own(name) or self.parent is None:
            return self._consts.get(name)
        return self.parent.const(name)

    def sources(self, name: str) -> frozenset[str]:
        if self._own(name) or self.parent is None:
            return self._sources.get(name, frozenset())
        return self.parent.sources(name)

    def value(self, name: str) -> Tensor | np.ndarray:
        """The known array when there is one, else the tensor."""
        known = self.const(name)
        return known if known is not None else self.tensor(name)

    def tensor(self, name: str) -> Tensor:
        if name in self._tensors:
            return self._tensors[name]
        if name not in self._consts and self.parent is not None and self.parent.defined(name):
            return self.parent.tensor(name)
        if name not in self._consts:
            raise OnnxImportError(f"value {name!r} is used before it is defined (or is never defined)")
        t = materialize(self.graph, name, self._consts[name])
        self._tensors[name] = t
        return t


def materialize(graph: Graph, name: str, value: np.ndarray) -> Tensor:
    """A known value as a tensor of `graph`: one element as a Constant node, more as a weight bound to it,
    named `name` when that name is free (else onnx_const_<k>)."""
    if value.dtype == object:  # symbolic shape values: one Iota per expression
        parts = [prim.iota(graph, as_expr(v), [1]) for v in value.reshape(-1)]
        flat = F.cat(parts, 0) if len(parts) > 1 else parts[0]
        return flat.reshape(value.shape)
    d = dt.dtype_of(value.dtype)
    if value.size == 1:
        c = graph.constant(value.reshape(()).item(), d)
        return c.reshape(value.shape) if value.ndim else c
    weight = name if _WEIGHT_NAME.match(name) and name not in graph.weights else None
    k = len(graph.weights)
    while weight is None or weight in graph.weights:
        weight, k = f"onnx_const_{k}", k + 1
    t = graph.weight(weight, value.shape, d)
    graph.bind({weight: value})
    return t
