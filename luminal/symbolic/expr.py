"""Symbolic integer expressions: the dimensions known only at run time, and view index arithmetic.

An `Expr` is immutable and always kept in a canonical, simplified form: every operator goes through the
smart constructors in `simplify.py`, so two expressions that simplify to the same form compare equal and
hash alike. Division and remainder follow Python's floor semantics (the C renderer preserves them).

Every expression carries integer bounds (`lo`, `hi`) derived from its variables' ranges; simplification
uses them to drop a `%` or `//` that cannot change the value.
"""

from __future__ import annotations

from typing import Any

# Operators of the expression language. ADD and MUL are n-ary with canonically ordered arguments.
CONST, VAR, ADD, MUL, DIV, MOD, MIN, MAX, LT, AND = (
    "const",
    "var",
    "add",
    "mul",
    "div",
    "mod",
    "min",
    "max",
    "lt",
    "and",
)
OPS = (CONST, VAR, ADD, MUL, DIV, MOD, MIN, MAX, LT, AND)

# Symbols are int32-sized unless declared otherwise: kernels index with 64-bit math, but sizes this large
# are never meaningful and keep bound products finite.
DEFAULT_MAX = 2**31 - 1


class SymbolicError(ValueError):
    """A symbolic expression could not be built, decided or evaluated."""


class Expr:
    """One node of a symbolic integer expression (use `sym()` and operators, not this constructor)."""

    __slots__ = ("op", "args", "lo", "hi", "_hash", "_text", "_ranges")

    def __init__(self, op: str, args: tuple, lo: int, hi: int):
        self.op = op
        self.args = args
        self.lo = lo
        self.hi = hi
        self._hash = hash((op, args)) if op != CONST else hash(args[0])
        self._text: str | None = None
        self._ranges: frozenset[tuple[str, int, int]] | None = None

    # ---- identity -------------------------------------------------------------------------------------
    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:  # structural equality of canonical forms
        if isinstance(other, int) and not isinstance(other, bool):
            return self.op == CONST and self.args[0] == other
        if not isinstance(other, Expr):
            return NotImplemented
        return self is other or (self._hash == other._hash and self.op == other.op and self.args == other.args)

    def __reduce__(self):
        # Rebuilt through `make`: the cached hash is of strings, which differ per process (PYTHONHASHSEED), so
        # a pickled one would make equal expressions unequal in another process.
        return (make, (self.op, self.args, self.lo, self.hi))

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __bool__(self) -> bool:
        if self.op == CONST:
            return bool(self.args[0])
        raise SymbolicError(f"the truth of symbolic expression {self} depends on run-time values")

    def __int__(self) -> int:
        if self.op == CONST:
            return self.args[0]
        raise SymbolicError(f"symbolic expression {self} has no value until its symbols are bound")

    __index__ = __int__

    @property
    def is_const(self) -> bool:
        return self.op == CONST

    @property
    def value(self) -> int:
        return int(self)

    def symbols(self) -> set[str]:
        """Names of the variables this expression depends on."""
        return {name for name, _, _ in self.variable_ranges()}

    def variable_ranges(self) -> frozenset[tuple[str, int, int]]:
        """Each variable this expression depends on as (name, lo, hi): equality ignores the ranges, the
        simplifier does not."""
        if self._ranges is None:
            if self.op == VAR:
                self._ranges = frozenset({(self.args[0], self.lo, self.hi)})
            elif self.op == CONST:
                self._ranges = frozenset()
            else:
                self._ranges = frozenset().union(*(a.variable_ranges() for a in self.args))
        return self._ranges

    # ---- operators (all canonicalising) --------------------------------------------------------------
    def __add__(self, o: ExprLike) -> Expr:
        return S.add(self, as_expr(o))

    def __radd__(self, o: ExprLike) -> Expr:
        return S.add(as_expr(o), self)

    def __sub__(self, o: ExprLike) -> Expr:
        return S.add(self, S.mul(as_expr(-1), as_expr(o)))  # a - b = a + (-1 * b)

    def __rsub__(self, o: ExprLike) -> Expr:
        return S.add(as_expr(o), S.mul(as_expr(-1), self))

    def __neg__(self) -> Expr:
        return S.mul(as_expr(-1), self)

    def __mul__(self, o: ExprLike) -> Expr:
        return S.mul(self, as_expr(o))

    def __rmul__(self, o: ExprLike) -> Expr:
        return S.mul(as_expr(o), self)

    def __floordiv__(self, o: ExprLike) -> Expr:
        return S.floordiv(self, as_expr(o))

    def __rfloordiv__(self, o: ExprLike) -> Expr:
        return S.floordiv(as_expr(o), self)

    def __mod__(self, o: ExprLike) -> Expr:
        return S.mod(self, as_expr(o))

    def __rmod__(self, o: ExprLike) -> Expr:
        return S.mod(as_expr(o), self)

    # Comparisons build 0/1-valued expressions; `bool()` of one decides it when it is constant.
    def __lt__(self, o: ExprLike) -> Expr:
        return S.lt(self, as_expr(o))

    def __le__(self, o: ExprLike) -> Expr:
        return S.lt(self, as_expr(o) + 1)  # a <= b  <=>  a < b + 1 over the integers

    def __gt__(self, o: ExprLike) -> Expr:
        return S.lt(as_expr(o), self)

    def __ge__(self, o: ExprLike) -> Expr:
        return S.lt(as_expr(o), self + 1)

    def __and__(self, o: ExprLike) -> Expr:
        return S.logical_and(self, as_expr(o))

    __rand__ = __and__

    def min(self, o: ExprLike) -> Expr:
        return S.smin(self, as_expr(o))

    def max(self, o: ExprLike) -> Expr:
        return S.smax(self, as_expr(o))

    # ---- evaluation ----------------------------------------------------------------------------------
    def substitute(self, mapping: dict[str, ExprLike]) -> Expr:
        """Replace variables by expressions (or ints) and re-simplify."""
        return Substitution(mapping)(self)

    def evaluate(self, env: dict[str, Any]) -> Any:
        """Value under `env` (names to ints, or to integer numpy arrays for a vectorised evaluation)."""
        from luminal.symbolic.evaluate import evaluate

        return evaluate(self, env)

    def render_c(self) -> str:
        """C (and CUDA / Metal) source for this expression, as 64-bit integer arithmetic."""
        from luminal.symbolic.render import render_c

        return render_c(self)

    # ---- text ----------------------------------------------------------------------------------------
    def __str__(self) -> str:
        if self._text is None:
            from luminal.symbolic.render import render_text

            self._text = render_text(self)
        return self._text

    def __repr__(self) -> str:
        return f"sym({str(self)!r})" if self.op != VAR else f"sym({self.args[0]!r})"

    def to_json(self) -> Any:
        """A plain-JSON form (ints stay ints) that `expr_from_json` reads back."""
        if self.op == CONST:
            return self.args[0]
        if self.op == VAR:
            return ["var", self.args[0], self.lo, self.hi]
        return [self.op, *[a.to_json() for a in self.args]]


ExprLike = Expr | int
Dim = Expr | int


# Every expression is made once (hash-consing): `make` returns the expression already made from the same operator,
# the same argument objects and the same bounds. Expressions made alike are then one object, so the smart
# constructors (simplify.py) remember their results by their arguments' identity: fusion re-simplifies the same
# index arithmetic for every load it inlines, and this is most of a compile's time. The tables are emptied when
# full (they hold what they index alive); equality stays structural, so an expression made before that still
# compares equal to its twin made after.
_MADE: dict[tuple, Expr] = {}
_RESULTS: dict[tuple, tuple] = {}  # (constructor, id(a), id(b)) -> (a, b, result): simplify.py's memo
TABLE_LIMIT = 100_000  # entries, each table (about 70 MB at most together)


def make(op: str, args: tuple, lo: int, hi: int) -> Expr:
    """The expression of operator `op` over `args` with bounds [lo, hi], made once while the table holds it."""
    key = (op, lo, hi, *args) if op in (CONST, VAR) else (op, lo, hi, *map(id, args))
    found = _MADE.get(key)
    if found is None:
        if len(_MADE) >= TABLE_LIMIT:
            forget()
        found = _MADE[key] = Expr(op, args, lo, hi)
    return found


def forget() -> None:
    """Empty the tables of made expressions and remembered results (memory; nothing else depends on them)."""
    _MADE.clear()
    _RESULTS.clear()
    _MADE.update(_SMALL_KEYS)


def const(value: int) -> Expr:
    found = _SMALL.get(value) if type(value) is int else None
    if found is not None:
        return found
    value = int(value)
    return make(CONST, (value,), value, value)


_SMALL = {k: Expr(CONST, (k,), k, k) for k in range(-256, 257)}  # index arithmetic builds millions of these
_SMALL_KEYS = {(CONST, k, k, k): e for k, e in _SMALL.items()}
_MADE.update(_SMALL_KEYS)


def var(name: str, lo: int = 0, hi: int = DEFAULT_MAX) -> Expr:
    if lo > hi:
        raise SymbolicError(f"symbol {name!r} has an empty range [{lo}, {hi}]")
    return make(VAR, (name,), lo, hi)


def as_expr(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if type(x) is int:  # the common case, before the checks below
        return const(x)
    if isinstance(x, bool):
        return const(int(x))
    try:
        import numpy as np

        if isinstance(x, np.integer):
            return const(int(x))
    except ImportError:  # pragma: no cover - numpy is a core dependency
        pass
    if isinstance(x, int):
        return const(x)
    raise SymbolicError(f"cannot use {type(x).__name__} {x!r} as a symbolic integer")


def as_dim(x: ExprLike) -> Dim:
    """The user-facing form of a dimension: a plain int when it is constant, else the expression."""
    e = as_expr(x)
    return e.args[0] if e.op == CONST else e


class Substitution:
    """One table of substitutions applied to many expressions: subexpressions they share are substituted and
    re-simplified once. Shared means the same object, so every expression passed in must outlive it."""

    def __init__(self, mapping: dict[str, ExprLike]):
        self.table = {k: as_expr(v) for k, v in mapping.items()}
        self._done: dict[int, Expr] = {}  # id of an expression passed in (or of a part of one) -> its result

    def __call__(self, e: Expr) -> Expr:
        return _substitute(e, self.table, self._done)


def _substitute(e: Expr, table: dict[str, Expr], cache: dict[int, Expr]) -> Expr:
    key = id(e)
    if key in cache:
        return cache[key]
    if e.op == CONST:
        out = e
    elif e.op == VAR:
        out = table.get(e.args[0], e)
    else:
        out = S.build(e.op, [_substitute(a, table, cache) for a in e.args])
    cache[key] = out
    return out


_DECODED: dict[str, Expr] = {}  # JSON text -> its expression: files repeat expressions (layers, every view)
_DECODED_MAX = 100_000


def expr_from_json(data: Any, depth: int = 0) -> Expr:
    """Inverse of `Expr.to_json`, for untrusted input: bounded depth, known operators only. Expressions are
    immutable, so each distinct JSON form is decoded (and simplified) once per process."""
    if depth == 0 and isinstance(data, list):
        try:
            key = repr(data)  # parsed JSON: repr tells every value and type apart, at C speed
        except RecursionError:
            raise SymbolicError("symbolic expression nested too deeply") from None
        hit = _DECODED.get(key)
        if hit is None:
            hit = _decode(data, 0)
            if len(_DECODED) >= _DECODED_MAX:
                _DECODED.clear()
            _DECODED[key] = hit
        return hit
    return _decode(data, depth)


def _decode(data: Any, depth: int) -> Expr:
    if depth > 64:
        raise SymbolicError("symbolic expression nested deeper than 64 levels")
    if isinstance(data, bool) or not isinstance(data, (int, list)):
        raise SymbolicError(f"malformed symbolic expression {data!r:.80}")
    if isinstance(data, int):
        if abs(data) > 2**62:
            raise SymbolicError(f"integer {data} in a symbolic expression is out of range")
        return const(data)
    if not data or data[0] not in OPS or data[0] == CONST:
        raise SymbolicError(f"malformed symbolic expression {data!r:.80}")
    if data[0] == VAR:
        if len(data) != 4 or not isinstance(data[1], str) or not all(isinstance(v, int) for v in data[2:]):
            raise SymbolicError(f"malformed symbol {data!r:.80}")
        return var(data[1], data[2], data[3])
    args = [_decode(a, depth + 1) for a in data[1:]]
    arity = {DIV: 2, MOD: 2, MIN: 2, MAX: 2, LT: 2, AND: 2}.get(data[0])
    if (arity is not None and len(args) != arity) or len(args) < 1:
        raise SymbolicError(f"operator {data[0]!r} given {len(args)} arguments")
    return S.build(data[0], args)


from luminal.symbolic import simplify as S  # noqa: E402  (the smart constructors need Expr defined)
