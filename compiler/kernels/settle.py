"""Folding what index substitution made trivial in a value tree: guards whose validity became a constant, and
the zeros such guards add.

Substituting a constant for an index (an unrolled reduction's step, a stacked row) decides the guards that
tested it: a row of a padded stack is its own value at its row and zero at every other. What is left is the
value itself, which element-wise fusion and the code generators then see plainly.
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.kernels import ir


def is_zero(v: ir.Value) -> bool:
    return isinstance(v, ir.Const) and not v.value


def settle(v: ir.Value) -> ir.Value:
    """`v` with constant guards resolved and `x + 0` folded to `x` (as the identities pass does: -0.0 + 0 is
    +0.0, the one difference), through element-wise ops."""
    return _settled(v, {})


def _settled(v: ir.Value, done: dict[int, ir.Value]) -> ir.Value:
    """`settle`, each node object once (`done`: id -> result, while `v` keeps them alive): a subtree the tree
    shares stays shared, and is not settled once per place it is read from. Settling copies no reduction (it
    stops at them), so which reduction objects the result holds is the same either way."""
    out = done.get(id(v))
    if out is None:
        out = done[id(v)] = _settled_node(v, done)
    return out


def _settled_node(v: ir.Value, done: dict[int, ir.Value]) -> ir.Value:
    if isinstance(v, ir.Guard):
        if v.valid == 0:
            return ir.Const(False if v.dtype == dt.bool_ else 0, v.dtype)
        inner = _settled(v.value, done)
        return inner if v.valid == 1 else v if inner is v.value else ir.Guard(v.valid, inner, v.dtype)
    if not isinstance(v, ir.Apply):
        return v
    args = tuple(_settled(a, done) for a in v.args)
    if v.op == "Add" and any(is_zero(a) for a in args):
        rest = [a for a in args if not is_zero(a)]
        return rest[0] if rest else args[0]
    # Nothing below changed: the node itself (its hash and summary already made), not an equal copy.
    return v if all(a is b for a, b in zip(args, v.args)) else ir.Apply(v.op, args, v.dtype)
