"""Canonicalising algebra: rules that only shrink a program, safe to run to saturation.

No commutativity or associativity: each binary identity is written for both operand orders instead, so the
e-graph grows by at most a few e-nodes per matched node and saturates in a handful of iterations.

A replaced node becomes `View(x, v)`: the buffer `x` read through the view the node read it with (the node's
shape is that view's shape). A folded constant becomes `View(ConstF(c), scalar_view(v))`, the scalar
broadcast to the node's shape. Views with padding read 0 there, so every rule that relies on a constant
operand requires that operand's view to be `unpadded`.

Folding is done in egglog's f64 and only for float32 (the reference computes in float32: results agree to
float32 rounding) and only to results in float32's normal range: beyond it float32 gives inf or 0 where f64
does not, and egglog's f64 cannot tell -0.0 from 0.0 (the sign of a zero changes what a later recip or log2
computes). x + 0 -> x is exact except that -0.0 + 0 gives +0.0, the same trade the deterministic
`apply_identities` pass makes.
"""

from __future__ import annotations

from egglog import Bool, String, eq, f64, function, i64, rewrite, rule, ruleset, set_, union, var, vars_

from luminal.compiler.search import terms as T


@function(egg_fn="splat_f32")
def splat(t: T.Tensor) -> f64: ...  # t is float32 and every element of it is this value (no merge: fails loudly)


x, y, z = vars_("x y z", T.Tensor)
va, vb, vs = vars_("va vb vs", i64)
a, b = vars_("a b", f64)
d = var("d", String)


def _unpadded(*views: i64) -> list:
    return [eq(T.unpadded(v)).to(Bool(True)) for v in views]


# Folds stay within float32's normal range (computed in f64, a result out of it would differ from the
# reference's inf, nan or flushed value), and so never reach zero, whose sign egglog's f64 cannot keep.
FLOAT32_RANGE = (f64(1.1754943508222875e-38), f64(3.4028234663852886e38))


def _fold(node: T.Tensor, operands: list, value: f64):
    """`node` (whose operands, as (term, view, value), are all splats) is the float32 constant `value`."""
    low, high = FLOAT32_RANGE
    facts = [eq(x).to(node), eq(vs).to(T.scalar_view(va)), abs(value) >= low, abs(value) <= high]
    for term, view, splatted in operands:
        facts += [eq(splat(term)).to(splatted), *_unpadded(view)]
    # `vs` broadcasts the scalar to the node's shape; egglog looks functions up only in a query, hence `eq`.
    return rule(*facts).then(union(x).with_(T.View(T.ConstF(value, "float32"), vs)))


# The splat analysis: which tensors are one float32 value everywhere.
ANALYSIS = [
    rule(eq(x).to(T.ConstF(a, "float32"))).then(set_(splat(x)).to(a)),  # a float32 scalar constant
    rule(eq(x).to(T.View(y, va)), eq(splat(y)).to(a), *_unpadded(va)).then(set_(splat(x)).to(a)),  # unpadded view
]

# Constant folding: an element-wise op of splats is a splat.
FOLDING = [
    _fold(T.Add(y, va, z, vb), [(y, va, a), (z, vb, b)], a + b),  # a + b
    _fold(T.Mul(y, va, z, vb), [(y, va, a), (z, vb, b)], a * b),  # a * b
    _fold(T.Recip(y, va), [(y, va, a)], f64(1.0) / a),  # recip(a) = 1 / a
    _fold(T.Sqrt(y, va), [(y, va, a)], a ** f64(0.5)),  # sqrt(a) = a ** 0.5
    _fold(T.Exp2(y, va), [(y, va, a)], f64(2.0) ** a),  # exp2(a) = 2 ** a
]

# Identities: the node is one of its operands, read through the operand's own view.
IDENTITIES = [
    rewrite(T.Mul(x, va, y, vb)).to(T.View(x, va), eq(splat(y)).to(f64(1.0)), *_unpadded(vb)),  # x * 1 = x
    rewrite(T.Mul(y, vb, x, va)).to(T.View(x, va), eq(splat(y)).to(f64(1.0)), *_unpadded(vb)),  # 1 * x = x
    rewrite(T.Mul(x, va, T.ConstI(1, d), vb)).to(T.View(x, va), *_unpadded(vb)),  # x * 1 = x (ints; bool: x and true)
    rewrite(T.Mul(T.ConstI(1, d), vb, x, va)).to(T.View(x, va), *_unpadded(vb)),  # 1 * x = x
    rewrite(T.Add(x, va, y, vb)).to(T.View(x, va), eq(splat(y)).to(f64(0.0)), *_unpadded(vb)),  # x + 0 = x
    rewrite(T.Add(y, vb, x, va)).to(T.View(x, va), eq(splat(y)).to(f64(0.0)), *_unpadded(vb)),  # 0 + x = x
    rewrite(T.Add(x, va, T.ConstI(0, d), vb)).to(T.View(x, va), *_unpadded(vb)),  # x + 0 = x (ints; bool: x or false)
    rewrite(T.Add(T.ConstI(0, d), vb, x, va)).to(T.View(x, va), *_unpadded(vb)),  # 0 + x = x
    rewrite(T.Recip(T.Recip(x, va), vb)).to(T.View(T.View(x, va), vb), *_unpadded(va, vb)),  # recip(recip(x)) = x
    # Not log2(exp2(x)) = x: exp2 rounds, and expm1/log1p compensate for that rounding (compiler/graph/passes.py).
]

RULES = ANALYSIS + FOLDING + IDENTITIES

algebra = ruleset(*RULES, name="algebra")
