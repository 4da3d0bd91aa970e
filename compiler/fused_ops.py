"""Ops the search adds to a graph, never a user: each is a composition of primitives given one name.

They exist between extraction and lowering only. Each has the primitives' contract (a shape/dtype rule and a
numpy reference equal to the composition it names), so an extracted candidate still runs on the reference
interpreter and the equivalence tests compare it with the graph it came from. They are not in `ops.BY_NAME`:
a graph file can never contain one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from luminal import ops


@dataclass(frozen=True)
class MatMul(ops.Op):
    """SumReduce(axis) of Mul(a, b): what matmul recognition (search/rules_matmul.py) turns expand·mul·sum into.

    Both inputs are read through views of the product's shape (the expanded operands), so the op is any
    contraction the primitive graph spelled: batched, transposed or strided operands all fit. Lowering makes it
    an `ir.Contract`, which the code generators run as a tiled GEMM.
    """

    name: ClassVar[str] = "MatMul"
    arity: ClassVar[int] = 2
    meaning: ClassVar[str] = "y = sum over one axis of a * b (the axis is removed)"
    axis: int = 0

    def infer(self, shapes, dtypes):
        product = ops.Mul().infer(shapes, dtypes)
        return ops.SumReduce(axis=self.axis).infer([product[0]], [product[1]])

    def reference(self, a, b, env=None):
        return ops.SumReduce(axis=self.axis).reference(ops.Mul().reference(a, b))

    def params(self):
        return {"axis": self.axis}


FUSED_OPS = {c.name: c for c in (MatMul,)}
