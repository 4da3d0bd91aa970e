"""Tensor: a handle on a graph node read through a view. Recording, not computing.

The methods follow PyTorch's names and semantics; each is a function of `luminal.functional`
(defined in `luminal/hl/`) bound here, so the method and the function are the same code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from luminal.dtypes import DType
from luminal.symbolic import Dim, as_dim
from luminal.view import ShapeTracker, format_shape

if TYPE_CHECKING:
    from luminal.graph import Graph


class Tensor:
    __slots__ = ("graph", "node", "st")  # st: the ShapeTracker this tensor reads its node through

    def __init__(self, graph: Graph, node: int, st: ShapeTracker):
        self.graph = graph
        self.node = node
        self.st = st

    # ---- metadata ------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[Dim, ...]:
        return tuple(as_dim(d) for d in self.st.shape)

    @property
    def dtype(self) -> DType:
        return self.graph.nodes[self.node].dtype

    @property
    def ndim(self) -> int:
        return len(self.st.shape)

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> Dim:
        return as_dim(self.st.numel())

    def with_view(self, st: ShapeTracker) -> Tensor:
        return Tensor(self.graph, self.node, st)

    def output(self, name: str) -> Tensor:
        """Mark this tensor as the graph output `name`; returns self so it chains."""
        self.graph.mark_output(name, self)
        return self

    def __repr__(self) -> str:
        return f"Tensor(%{self.node}, {self.dtype.name}{format_shape(self.shape)})"

    def __len__(self) -> int:
        d = self.shape[0] if self.shape else None
        if not isinstance(d, int):
            raise TypeError(f"len() of a tensor whose first dim is {d!r}")
        return d

    def __iter__(self):
        # Indexing cannot detect the end of a symbolic dim, so iteration needs a concrete length (len raises).
        return (self[k] for k in range(len(self)))

    def __bool__(self) -> bool:
        raise TypeError("a luminal Tensor is a recorded value with no data: it has no truth value")

    __hash__ = object.__hash__  # == builds an op (as in PyTorch), so identity hashing is kept explicitly


def _bind_methods() -> None:
    """Attach every high-level op that takes a tensor first as a method (`t.exp()` is `F.exp(t)`)."""
    from luminal.hl import METHOD_MODULES

    for module in METHOD_MODULES:
        for name in module.METHODS:
            setattr(Tensor, name, getattr(module, name))
        for dunder, fn_name in getattr(module, "DUNDERS", {}).items():
            setattr(Tensor, dunder, getattr(module, fn_name))
