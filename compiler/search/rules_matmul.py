"""Matmul recognition: a sum-reduce of a product whose operands vary along different output axes is a GEMM.

High-level matmul is expand·mul·sum (DESIGN.md): both operands are broadcast to [..., M, N, K] and the product
summed over K. The rule adds `MatMul(a, va, b, vb, axis)` to the product's e-class when
- the reduce reads the product whole and in order (`identity_view`), so the pair is one contraction, and
- some output axis is read by A only (an M axis) and some by B only (an N axis): `axes_read` bitmasks of the
  operands' views, with the contracted axis masked out. Without both there is nothing to tile (a batched dot
  product or an outer-product sum), and the plain loops are as good.
Views, transposes and batch axes need no rule of their own: they stay in the operand views, and the GEMM
code generator packs whatever index expression a view has. Whether the MatMul is chosen is the extraction's
cost model's call (search/costs.py), not the rule's.

`EPILOGUE` lets element-wise readers of a MatMul compute it in their own loop (rules_fusion.py's `Inline`):
the bias add, activation and residual add after a GEMM become its epilogue, in the one kernel that stores
only the final result. These run in the fusion phase, after recognition has saturated.
"""

from __future__ import annotations

from egglog import Bool, eq, i64, ne, relation, rule, ruleset, union, vars_

from luminal.compiler.search import terms as T
from luminal.compiler.search.rules_fusion import elementwise_readers

x, y, z = vars_("x y z", T.Tensor)
va, vb, vm, ax = vars_("va vb vm ax", i64)


def _only_in(mine, other, axis):
    """Axes `mine` reads and `other` does not, the contracted axis aside, as a nonzero mask."""
    return ne(T.axes_read(mine) & ~T.axes_read(other) & ~(i64(1) << axis)).to(i64(0))


RULES = [
    rule(
        eq(x).to(T.SumReduce(T.Mul(y, va, z, vb), vm, ax)),
        eq(T.identity_view(vm)).to(Bool(True)),
        _only_in(va, vb, ax),
        _only_in(vb, va, ax),
    ).then(union(x).with_(T.MatMul(y, va, z, vb, ax))),
]

contracted = relation("contracted", T.Tensor)  # the e-class holds a MatMul

EPILOGUE = [rule(eq(x).to(T.MatMul(y, va, z, vb, ax))).then(contracted(x)), *elementwise_readers(contracted)]

matmul = ruleset(*RULES, name="matmul")
