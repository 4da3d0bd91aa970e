"""Index arithmetic folded by the loop variables' symbolic extents: `(q * S + r) // S` is q, `% S` is r, when
0 <= r < S follows from each variable staying below its extent.

The symbolic simplifier bounds a variable by numbers only, so a division by a size like 16 * row_blocks + 1
(a KV cache's positions) stays, even where the variable read along it runs to exactly that size. Inlining a
producer through such a view (compiler/fusion/fuse.py's unflattening) leaves one such division per axis; given the
extents in scope, this folds them and the index becomes affine again.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace

from luminal.compiler.kernels import ir
from luminal.compiler.kernels.affine import affine
from luminal.symbolic import Expr, as_expr, var

_PROBES = ({}, 7, 13)  # symbol values at which a coefficient's ratio to a divisor is read before it is proven


# (expression, extents, its variables' ranges) -> folded. A decode step's layers and an attention's operands read
# the same positions many times; the simplifier reads variables' ranges, which equality ignores, hence the key.
_FOLDED: dict[tuple, Expr] = {}
_FOLDED_MAX = 50_000


def fold(e: Expr, extents: Mapping[str, Expr]) -> Expr:
    """`e` with every division and modulo whose dividend splits exactly (see the module docstring) folded;
    `extents`: each loop variable in scope ranges over [0, extent)."""
    if e.op in ("const", "var"):
        return e
    ranges = e.variable_ranges()
    scope = {name: extents[name] for name, _, _ in ranges if name in extents}  # all that folding `e` reads
    key = (e, tuple(sorted(scope.items())), ranges)
    found = _FOLDED.get(key)
    if found is None:
        found = _fold(e, extents)
        if len(_FOLDED) >= _FOLDED_MAX:
            _FOLDED.clear()
        _FOLDED[key] = found
    return found


def _fold(e: Expr, extents: Mapping[str, Expr]) -> Expr:
    args = tuple(fold(a, extents) if isinstance(a, Expr) else a for a in e.args)
    if e.op == "lt" and args[0].op == "var" and args[0].args[0] in extents:
        if (args[1] - extents[args[0].args[0]]).lo >= 0:  # i < extent <= bound: a padded view's check inside
            return as_expr(1)  # a loop that never reaches the padding
    if e.op in ("div", "mod"):
        split = _split(args[0], args[1], extents)
        if split is not None:
            return split[0] if e.op == "div" else split[1]
    return _rebuilt(e, args)


def _rebuilt(e: Expr, args: tuple) -> Expr:
    if args == e.args:
        return e
    combine = {
        "add": lambda xs: sum(xs[1:], xs[0]),
        "mul": lambda xs: _product(xs),
        "div": lambda xs: xs[0] // xs[1],
        "mod": lambda xs: xs[0] % xs[1],
        "min": lambda xs: xs[0].min(xs[1]),
        "max": lambda xs: xs[0].max(xs[1]),
        "lt": lambda xs: xs[0] < xs[1],
        "and": lambda xs: xs[0] & xs[1],
    }
    return combine[e.op]([as_expr(a) for a in args])


def _product(xs: list[Expr]) -> Expr:
    out = xs[0]
    for x in xs[1:]:
        out = out * x
    return out


def _largest(e: Expr, extents: Mapping[str, Expr]) -> Expr | None:
    """The largest value of a variable, `variable // constant` or `variable % constant` in scope, symbolic; None
    for other terms."""
    if e.op == "var" and e.args[0] in extents:
        return extents[e.args[0]] - 1
    if e.op not in ("div", "mod") or e.args[0].op != "var" or e.args[0].args[0] not in extents:
        return None
    divisor = e.args[1]
    if not divisor.is_const or divisor.value < 1:  # a negative divisor's terms may be negative
        return None
    largest = extents[e.args[0].args[0]] - 1
    return largest // divisor if e.op == "div" else largest.min(divisor - 1)


def _terms(e: Expr, extents: Mapping[str, Expr]) -> dict[Expr, Expr]:
    """The variables of `e` in scope and its `variable // constant` terms, each with its largest value."""
    found: dict[Expr, Expr] = {}
    stack = [e]
    while stack:
        node = stack.pop()
        largest = _largest(node, extents)
        if largest is not None:
            found[node] = largest
        elif node.op != "const":
            stack.extend(a for a in node.args if isinstance(a, Expr))
    return found


def _ratio(coefficient: Expr, divisor: Expr) -> int | None:
    """The integer m with coefficient == m * divisor (proven structurally), or None."""
    symbols = coefficient.symbols() | divisor.symbols()
    ratios = set()
    for probe in _PROBES:
        env = {s: probe for s in symbols} if isinstance(probe, int) else {s: 1 for s in symbols}
        c, d = int(coefficient.evaluate(env)), int(divisor.evaluate(env))
        if d == 0 or c % d:
            return None
        ratios.add(c // d)
    if len(ratios) != 1:
        return None
    m = ratios.pop()
    return m if coefficient == divisor * m else None


def _split(dividend: Expr, divisor: Expr, extents: Mapping[str, Expr]) -> tuple[Expr, Expr] | None:
    """(quotient, remainder) of `dividend` by `divisor` when the dividend is affine in the terms in scope and the
    terms whose coefficients are not multiples of the divisor provably sum to within [0, divisor)."""
    if divisor.lo < 1:
        return None
    terms = _terms(dividend, extents)
    names = {term: f"_fold{k}" for k, term in enumerate(terms)}
    stand_in = dividend
    for term, name in sorted(names.items(), key=lambda t: -_size(t[0])):  # `_i1 // 2` before `_i1`
        stand_in = _replace(stand_in, term, var(name, 0, max(term.hi, 0)))
    found = affine(stand_in, list(names.values()))
    if found is None or stand_in.symbols() & extents.keys():
        return None
    offset, coefficients = found
    back = {name: term for term, name in names.items()}
    quotient, remainder = as_expr(0), as_expr(0)
    smallest, largest = as_expr(0), as_expr(0)  # the remainder's bounds: each term between 0 and its largest
    for name, c in itertools.chain([(None, offset)], coefficients.items()):
        m = _ratio(c, divisor)
        term = as_expr(1) if name is None else back[name]
        if m is not None and m >= 0:  # a dividend never negative: C's division and modulo agree with floor's
            quotient = quotient + term * m
            continue
        if m is not None:
            return None
        remainder = remainder + term * c
        if name is None:
            smallest, largest = smallest + c, largest + c
        elif c.lo >= 0:
            largest = largest + c * terms[back[name]]
        elif c.hi <= 0:  # rotate-half's `-32 * (d // 32)`, which the offset or other terms make up for
            smallest = smallest + c * terms[back[name]]
        else:
            return None
    if smallest.lo < 0 or (divisor - largest - 1).lo < 0:
        return None
    return quotient, remainder


def _size(e: Expr) -> int:
    return 1 + sum(_size(a) for a in e.args if isinstance(a, Expr))


def _replace(e: Expr, old: Expr, new: Expr) -> Expr:
    if e == old:
        return new
    if e.op in ("const", "var"):
        return e
    return _rebuilt(e, tuple(_replace(a, old, new) if isinstance(a, Expr) else a for a in e.args))


def fold_value(v: ir.Value, extents: Mapping[str, Expr], fold_index=fold) -> ir.Value:
    """Every index expression of a value tree folded (by `fold_index`, `fold` unless given), with the variables
    each node binds added in its scope. A subtree the tree holds in several places (inlining shares them) is
    folded once per scope."""
    return _ValueFolding(fold_index).value(v, extents)


class _ValueFolding:
    def __init__(self, fold_index):
        self.fold_index = fold_index
        self.done: dict[tuple[int, int], ir.Value] = {}  # (id of a node, id of its scope) -> folded
        self.scopes: list[Mapping[str, Expr]] = []  # every scope made here, alive while their ids are keys

    def value(self, v: ir.Value, extents: Mapping[str, Expr]) -> ir.Value:
        key = (id(v), id(extents))
        out = self.done.get(key)
        if out is None:
            out = self.done[key] = self._folded(v, extents)
        return out

    def scope(self, extents: Mapping[str, Expr], **bound: Expr) -> Mapping[str, Expr]:
        inner = {**extents, **bound}
        self.scopes.append(inner)
        return inner

    def _folded(self, v: ir.Value, extents: Mapping[str, Expr]) -> ir.Value:
        # The commonest nodes built directly: dataclasses.replace costs several times a constructor's call.
        fold_index, within = self.fold_index, self.value
        if isinstance(v, ir.Load):
            return ir.Load(v.buffer, fold_index(v.index, extents), v.dtype)
        if isinstance(v, ir.IndexValue):
            return replace(v, expr=fold_index(v.expr, extents))
        if isinstance(v, ir.Guard):
            valid, value = fold_index(v.valid, extents), within(v.value, extents)
            return value if valid == 1 else ir.Guard(valid, value, v.dtype)  # a guard that always holds goes
        if isinstance(v, ir.Apply):
            return ir.Apply(v.op, tuple(within(a, extents) for a in v.args), v.dtype)
        if isinstance(v, ir.GatherLoad):
            return replace(v, at=within(v.at, extents))
        if isinstance(v, ir.Reduce):
            return replace(v, body=within(v.body, self.scope(extents, **{v.var: v.extent})))
        if isinstance(v, ir.Contract):
            inner = self.scope(extents, **{v.var: v.extent})
            return replace(v, a=within(v.a, inner), b=within(v.b, inner))
        if isinstance(v, ir.Attend):
            inner = self.scope(extents, **{v.s_var: v.s_extent, v.e_var: v.e_extent})
            return replace(v, **{f: within(getattr(v, f), inner) for f in ("q", "k", "v", "bias")})
        return v


def axes_extents(shape) -> dict[str, Expr]:
    """A kernel's loop variables `_i0..` with their extents."""
    return {f"_i{k}": as_expr(d) for k, d in enumerate(shape)}
