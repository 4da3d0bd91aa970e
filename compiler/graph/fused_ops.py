"""Ops the search adds to a graph, never a user: each is a composition of primitives given one name.

They exist between extraction and lowering only. Each has the primitives' contract (a shape/dtype rule and a
numpy reference equal to the composition it names), so an extracted candidate still runs on the reference
interpreter and the equivalence tests compare it with the graph it came from. They are not in `ops.BY_NAME`:
a graph file can never contain one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

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


LOWEST_F32 = float(np.finfo(np.float32).min)
LOG2_E = 1.4426950408889634


@dataclass(frozen=True)
class Attention(ops.Op):
    """softmax(scale * q·k + bias) · v over the key axis, as attention recognition (search/rules_attention.py)
    finds it in the primitive graph: the score matrix is never a buffer (lowering makes it an `ir.Attend`).

    Inputs are read through views of the two products the primitive graph spelled: q and k as [..., L, S, E]
    (q not varying along S, k not along L), v as [..., L, N, S] (not varying along L) and the additive bias as
    [..., L, S]; the output is [..., L, N]. The softmax is the graph's own formula: exp2((x - peak) * log2 e)
    over its sum, the peak the row max (clamped to the lowest float32 when `safe`, where a sum under 0.5 also
    counts as 1, so a fully masked row gives zeros, as torch's scaled_dot_product_attention does).
    """

    name: ClassVar[str] = "Attention"
    arity: ClassVar[int] = 4
    meaning: ClassVar[str] = "y = softmax(scale * (q . k) + bias) . v over the key axis"
    scale: float = 1.0
    safe: int = 1

    def infer(self, shapes, dtypes):
        q, k, v, bias = shapes
        if len(q) < 3 or tuple(q) != tuple(k) or len(v) != len(q) or tuple(bias) != tuple(q[:-1]):
            raise self.fail("q, k, v and bias are not the products attention reads", shapes)
        if tuple(v[:-2]) != tuple(q[:-2]) or v[-1] != q[-2]:
            raise self.fail("v does not match the scores", shapes)
        return tuple(v[:-1]), dtypes[0]

    def reference(self, q, k, v, bias, env=None):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            scores = (q * k).sum(axis=-1, dtype=np.float32) * np.float32(self.scale) + bias
            peak = scores.max(axis=-1, keepdims=True)
            if self.safe:
                peak = np.maximum(peak, np.float32(LOWEST_F32))
            e = np.exp2((scores - peak) * np.float32(LOG2_E))
            total = e.sum(axis=-1, keepdims=True, dtype=np.float32)
            if self.safe:
                total = total + (total < 0.5).astype(np.float32)
            p = e * (np.float32(1.0) / total)
            return (p[..., None, :] * v).sum(axis=-1, dtype=np.float32).astype(np.float32)

    def params(self):
        return {"scale": self.scale, "safe": self.safe}


@dataclass(frozen=True)
class Inline(ops.Op):
    """Its input, computed in the loop of each kernel that reads it instead of stored: what the fusion rules
    (search/rules_fusion.py) offer and extraction chose. The value is the input's; lowering fuses the
    producer into the readers (compiler/fusion/fuse_chosen.py)."""

    name: ClassVar[str] = "Inline"
    arity: ClassVar[int] = 1
    meaning: ClassVar[str] = "y = x, computed where it is read"

    def infer(self, shapes, dtypes):
        return tuple(shapes[0]), dtypes[0]

    def reference(self, x, env=None):
        return x


FUSED_OPS = {c.name: c for c in (MatMul, Attention, Inline)}
