"""Smart constructors: every symbolic operator is built here, already simplified.

Canonical form (what makes equal expressions compare equal):
- a sum is flat, like terms are combined (`2*x + 3*x -> 5*x`), terms are sorted, the constant is last;
- a product is flat, its constant first, factors sorted, and products distribute over sums;
- `//` and `%` by a divisor that divides a term take that term out (`(4*x + y) // 4 -> x + y // 4`,
  `(4*x + y) % 4 -> y % 4`), nested divisions merge, and bounds drop what cannot change the value
  (`i % 8 -> i` when `0 <= i < 8`);
- `(x // d) * d + x % d -> x`, the identity that keeps reshaped view indices short.
Every rule is an identity of floor division over the integers; the property tests check them against
evaluation on random assignments.
"""

from __future__ import annotations

from math import gcd

from luminal.symbolic import expr as E
from luminal.symbolic.expr import ADD, AND, CONST, DIV, LT, MAX, MIN, MOD, MUL, Expr, SymbolicError, const, make

_node = make


def _remembered(constructor):
    """`constructor(a, b)` computed once per pair of argument objects (expr.py's `make` makes equal expressions one
    object), while the table holds the pair."""
    tag = constructor.__name__

    def remembered(a: Expr, b: Expr) -> Expr:
        key = (tag, id(a), id(b))
        hit = E._RESULTS.get(key)
        if hit is not None and hit[0] is a and hit[1] is b:
            return hit[2]
        out = constructor(a, b)
        if len(E._RESULTS) >= E.TABLE_LIMIT:
            E.forget()
        E._RESULTS[key] = (a, b, out)
        return out

    remembered.__name__ = remembered.__qualname__ = tag
    remembered.__doc__ = constructor.__doc__
    return remembered


def _key(e: Expr) -> str:
    return str(e)


# ---- terms: coefficient * product of factors ---------------------------------------------------------


def _split(t: Expr) -> tuple[int, Expr | None]:
    """A term as (integer coefficient, the rest); the rest is None for a constant."""
    if t.op == CONST:
        return t.args[0], None
    if t.op == MUL and t.args[0].op == CONST:
        rest = t.args[1:]
        return t.args[0].args[0], rest[0] if len(rest) == 1 else _product_node(rest)
    return 1, t


def _factors(rest: Expr | None) -> tuple[Expr, ...]:
    if rest is None:
        return ()
    return rest.args if rest.op == MUL else (rest,)


def _interval_mul(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    corners = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(corners), max(corners)


def _product_node(factors: tuple[Expr, ...]) -> Expr:
    lo, hi = 1, 1
    for f in factors:
        lo, hi = _interval_mul((lo, hi), (f.lo, f.hi))
    return _node(MUL, factors, lo, hi)


def _term(coef: int, rest: Expr | None) -> Expr:
    if rest is None or coef == 0:
        return const(coef)
    if coef == 1:
        return rest
    return _product_node((const(coef), *_factors(rest)))


def _sum(terms: dict[Expr, int], c: int) -> Expr:
    parts = sorted((_term(k, r) for r, k in terms.items() if k != 0), key=_key)
    if c != 0 or not parts:
        parts.append(const(c))
    if len(parts) == 1:
        return parts[0]
    return _node(ADD, tuple(parts), sum(p.lo for p in parts), sum(p.hi for p in parts))


def _collect(exprs) -> tuple[dict[Expr, int], int]:
    terms: dict[Expr, int] = {}
    c = 0
    for x in exprs:
        for t in x.args if x.op == ADD else (x,):
            k, rest = _split(t)
            if rest is None:
                c += k
            else:
                terms[rest] = terms.get(rest, 0) + k
    return terms, c


# ---- + and * -----------------------------------------------------------------------------------------


@_remembered
def add(a: Expr, b: Expr) -> Expr:
    terms, c = _collect((a, b))
    for rest, k in list(terms.items()):
        if rest.op != MOD or terms.get(rest, 0) == 0:
            continue
        x, d = rest.args
        # k * (x % d) + k * d * (x // d)  ->  k * x
        kq, rq = _split(mul(const(k), mul(d, _node(DIV, (x, d), 0, 0))))
        if rq is not None and terms.get(rq) == kq:
            del terms[rest], terms[rq]
            return add(_sum(terms, c), mul(const(k), x))
    return _sum(terms, c)


@_remembered
def mul(a: Expr, b: Expr) -> Expr:
    if a.op == CONST and b.op == CONST:
        return const(a.args[0] * b.args[0])
    for s, o in ((a, b), (b, a)):
        if s.op == ADD:  # distribute: (x + y) * o = x*o + y*o
            out = const(0)
            for t in s.args:
                out = add(out, mul(t, o))
            return out
    c = 1
    factors: list[Expr] = []
    for x in (a, b):
        for f in x.args if x.op == MUL else (x,):
            if f.op == CONST:
                c *= f.args[0]
            else:
                factors.append(f)
    if c == 0 or not factors:
        return const(c)
    factors.sort(key=_key)
    return _term(c, factors[0] if len(factors) == 1 else _product_node(tuple(factors)))


# ---- exact division -------------------------------------------------------------------------------------


def divide_exact(t: Expr, d: Expr) -> Expr | None:
    """`q` with `q * d == t` for every assignment, found structurally, or None."""
    if t == d:
        return const(1)
    if t.op == ADD:
        parts = [divide_exact(x, d) for x in t.args]
        if any(p is None for p in parts):
            return None
        out = const(0)
        for p in parts:
            out = add(out, p)
        return out
    kd, rd = _split(d)
    if kd == 0:
        return None
    kt, rt = _split(t)
    if kt % kd:
        return None
    remaining = list(_factors(rt))
    for f in _factors(rd):
        if f not in remaining:
            return None
        remaining.remove(f)
    out = const(kt // kd)
    for f in remaining:
        out = mul(out, f)
    return out


def _positive(d: Expr) -> bool:
    return d.lo > 0


def _div_bounds(a: Expr, d: Expr) -> tuple[int, int]:
    if _positive(d):
        corners = [x // y for x in (a.lo, a.hi) for y in (d.lo, d.hi)]
        return min(corners), max(corners)
    m = max(abs(a.lo), abs(a.hi)) + 1
    return -m, m


@_remembered
def floordiv(a: Expr, d: Expr) -> Expr:
    if d.op == CONST:
        dv = d.args[0]
        if dv == 0:
            raise SymbolicError(f"division of {a} by zero")
        if a.op == CONST:
            return const(a.args[0] // dv)
        if dv == 1:
            return a
        if dv < 0:  # floor(a / d) == floor(-a / -d)
            return floordiv(mul(const(-1), a), const(-dv))
    elif not _positive(d):
        return _node(DIV, (a, d), *_div_bounds(a, d))
    q = divide_exact(a, d)
    if q is not None:
        return q
    if a.op == ADD:  # (q*d + r) // d = q + r // d
        whole, rest = const(0), const(0)
        for t in a.args:
            qt = divide_exact(t, d)
            whole, rest = (add(whole, qt), rest) if qt is not None else (whole, add(rest, t))
        if whole != 0:
            return add(whole, floordiv(rest, d))
    if d.op == CONST:
        dv = d.args[0]
        g = _content_gcd(a, dv)
        if g > 1:  # (g*p) // (g*q) = p // q
            return floordiv(divide_exact(a, const(g)), const(dv // g))
        if a.op == DIV and a.args[1].op == CONST and a.args[1].args[0] > 0:  # (x // m) // d = x // (m*d)
            return floordiv(a.args[0], const(a.args[1].args[0] * dv))
    lo, hi = _div_bounds(a, d)
    if lo == hi:
        return const(lo)
    return _node(DIV, (a, d), lo, hi)


def _content_gcd(a: Expr, dv: int) -> int:
    g = dv
    for t in a.args if a.op == ADD else (a,):
        g = gcd(g, _split(t)[0])
    return g


def _reduced(t: Expr, dv: int) -> tuple[int, Expr | None]:
    """A term's (coefficient, rest), equal to it modulo dv > 0: a constant taken into [0, dv), a coefficient of
    dv or more reduced below dv (a negative one is kept: -x reads better than (dv - 1) x, and bounds stay tight)."""
    k, rest = _split(t)
    return (k % dv if rest is None or k >= dv else k), rest


@_remembered
def mod(a: Expr, d: Expr) -> Expr:
    if d.op == CONST:
        dv = d.args[0]
        if dv == 0:
            raise SymbolicError(f"remainder of {a} by zero")
        if a.op == CONST:
            return const(a.args[0] % dv)
        if dv in (1, -1):
            return const(0)
        if dv < 0:
            return _node(MOD, (a, d), dv + 1, 0)
    elif not _positive(d):
        m = max(abs(d.lo), abs(d.hi))
        return _node(MOD, (a, d), -m, m)
    if divide_exact(a, d) is not None:
        return const(0)
    if a.op == ADD or (a.op == MUL and a.args[0].op == CONST):  # (q*d + r) % d = r % d
        terms = list(a.args) if a.op == ADD else [a]
        kept = [t for t in terms if divide_exact(t, d) is None]
        if d.op == CONST:  # (k*x + r) % d = ((k % d)*x + r) % d: a conv's window read through a padded row
            kept = [_term(*_reduced(t, d.args[0])) for t in kept]
            kept = [t for t in kept if t != 0]
        if kept != terms:
            rest = const(0)
            for t in kept:
                rest = add(rest, t)
            return mod(rest, d)
    if a.op == MOD:
        inner = a.args[1]
        if inner == d:  # (x % d) % d = x % d
            return a
        if d.op == CONST and inner.op == CONST and inner.args[0] > 0 and inner.args[0] % d.args[0] == 0:
            return mod(a.args[0], d)  # (x % (k*d)) % d = x % d
    if a.lo >= 0 and a.hi < d.lo:
        return a
    if a.hi < 0 and a.lo >= -d.lo:  # -d <= a < 0: a % d = a + d (a sequence's last position, (-1) % seq)
        return add(a, d)
    if d.op == CONST:
        g = _content_gcd(a, d.args[0])
        if g > 1:  # (g*p) % (g*q) = g * (p % q)
            return mul(const(g), mod(divide_exact(a, const(g)), const(d.args[0] // g)))
    hi = d.hi - 1
    if a.lo >= 0:
        hi = min(hi, a.hi)
    return _node(MOD, (a, d), 0, hi)


# ---- min, max, comparisons ---------------------------------------------------------------------------


@_remembered
def smin(a: Expr, b: Expr) -> Expr:
    if a.hi <= b.lo:
        return a
    if b.hi <= a.lo:
        return b
    if a == b:
        return a
    x, y = sorted((a, b), key=_key)
    return _node(MIN, (x, y), min(a.lo, b.lo), min(a.hi, b.hi))


@_remembered
def smax(a: Expr, b: Expr) -> Expr:
    if a.lo >= b.hi:
        return a
    if b.lo >= a.hi:
        return b
    if a == b:
        return a
    x, y = sorted((a, b), key=_key)
    return _node(MAX, (x, y), max(a.lo, b.lo), max(a.hi, b.hi))


@_remembered
def lt(a: Expr, b: Expr) -> Expr:
    diff = add(a, mul(const(-1), b))
    if diff.hi < 0:
        return const(1)
    if diff.lo >= 0:
        return const(0)
    return _node(LT, (a, b), 0, 1)


@_remembered
def logical_and(a: Expr, b: Expr) -> Expr:
    """1 when both are non-zero, else 0."""
    for x, y in ((a, b), (b, a)):
        if x.op == CONST:
            return const(0) if x.args[0] == 0 else _truth(y)
    if a == b:
        return _truth(a)
    x, y = sorted((a, b), key=_key)
    return _node(AND, (x, y), 0, 1)


def _truth(e: Expr) -> Expr:
    if e.lo >= 0 and e.hi <= 1:
        return e
    if e.op == CONST:
        return const(int(e.args[0] != 0))
    return _node(AND, (e, const(1)), 0, 1)


_BINARY = {DIV: floordiv, MOD: mod, MIN: smin, MAX: smax, LT: lt, AND: logical_and}


def build(op: str, args: list[Expr]) -> Expr:
    """Rebuild a node of operator `op` from (possibly new) arguments, simplifying."""
    if op in (ADD, MUL):
        out = args[0]
        for x in args[1:]:
            out = add(out, x) if op == ADD else mul(out, x)
        return out
    if op not in _BINARY or len(args) != 2:
        raise SymbolicError(f"cannot build {op!r} from {len(args)} arguments")
    return _BINARY[op](args[0], args[1])
