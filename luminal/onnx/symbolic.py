"""Shape arithmetic on symbolic dims, at import.

A model exported with dynamic axes computes its Reshape targets from Shape: Shape -> Gather -> Unsqueeze ->
Concat -> Reshape. With symbolic dims those values are not numbers, but they are still known at import as
expressions: here they are numpy arrays of dtype object holding ints and luminal `Expr`s (int64 values, in
ONNX's terms), evaluated by numpy itself for the few operators that shape arithmetic uses. A value that
reaches any other operator enters the graph as Iota nodes of its expressions (scope.materialize).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal.symbolic import Expr, SymbolicError, as_dim, as_expr

INTEGER_TYPES = {6, 7}  # ONNX INT32 and INT64: casts to these leave a shape value as it is


class SymbolBound(Exception):
    """Raised by a translator that finds the model defined only while `symbol` <= `hi`: BERT slices its
    512 position ids to the sequence length and then expands them to it, which holds only up to 512. The
    import starts again with the symbol's range narrowed, so that every later shape sees the bound."""

    def __init__(self, symbol: str, hi: int) -> None:
        super().__init__(f"symbol {symbol} is at most {hi}")
        self.symbol = symbol
        self.hi = hi


def is_symbolic(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == object


def simplified(value: np.ndarray) -> np.ndarray:
    """Expressions that became constants turn into ints; with no expression left, an int64 array."""
    flat = [as_dim(v) if isinstance(v, Expr) else int(v) for v in value.reshape(-1)]
    if all(isinstance(v, int) for v in flat):
        return np.array(flat, dtype=np.int64).reshape(value.shape)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(value.shape)


def shape_value(dims: list) -> np.ndarray:
    out = np.empty(len(dims), dtype=object)
    out[:] = [as_dim(d) for d in dims]
    return simplified(out)


def _array(value: Any) -> np.ndarray:
    """An object array of `value`, which numpy may hand back as a bare element (np.take with a 0-d index)."""
    if isinstance(value, np.ndarray):
        return value.astype(object)
    out = np.empty((), dtype=object)
    out[()] = value
    return out


def _ints(value: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _equal(a: Any, b: Any) -> bool | None:
    """a == b when it is decided for every value of the symbols, else None."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return int(a) == int(b)
    if isinstance(a, Expr) and isinstance(b, Expr):
        return True if a == b else None
    e, n = (a, int(b)) if isinstance(a, Expr) else (b, int(a))
    return False if n < e.lo or n > e.hi else None


def _ordered(holds) -> Any:
    """A comparison of shape values, decided by the symbols' ranges (seq > 0 always holds), else None."""

    def compare(a: Any, b: Any) -> bool | None:
        e = as_expr(holds(as_expr(a), as_expr(b)))  # a 0/1 expression, constant when the ranges decide it
        return bool(e.args[0]) if e.is_const else None

    return compare


_COMPARISONS = {
    "Equal": _equal,
    "Less": _ordered(lambda a, b: a < b),
    "LessOrEqual": _ordered(lambda a, b: a <= b),
    "Greater": _ordered(lambda a, b: a > b),
    "GreaterOrEqual": _ordered(lambda a, b: a >= b),
}


def _trunc_div(a: Any, b: Any) -> Any:
    if isinstance(a, Expr) or isinstance(b, Expr):
        return a // b  # shape values are non-negative, where floor and truncation agree
    q = abs(int(a)) // abs(int(b))
    return q if (int(a) >= 0) == (int(b) >= 0) else -q


def fold(op: str, attrs: dict, values: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    """The outputs of `op` on known values of which some are symbolic, or None when `op` is not one that shape
    arithmetic uses, or its result's size would depend on the symbols (a slice of a buffer up to the sequence
    length): the node is then translated into the graph, where a symbolic size is a view bounded by a symbol."""
    try:
        return _evaluate(op, attrs, values, opset)
    except SymbolicError:  # a symbol where numpy needs a number: a size or an index that is not known yet
        return None


def _evaluate(op: str, attrs: dict, values: list[np.ndarray | None], opset: int) -> list[np.ndarray] | None:
    x = _array(values[0])
    if op == "Identity":
        return [x]
    if op in ("Cast", "CastLike"):
        return [x] if op == "CastLike" or attrs.get("to") in INTEGER_TYPES else None
    if op == "Gather":
        return [_array(np.take(x, np.asarray(values[1]).astype(np.int64), axis=int(attrs.get("axis", 0))))]
    if op == "Unsqueeze":
        axes = attrs.get("axes") if opset < 13 else _ints(values[1])
        rank = x.ndim + len(axes)
        for a in sorted(a % rank for a in axes):
            x = np.expand_dims(x, a)
        return [x]
    if op == "Squeeze":
        axes = attrs.get("axes") if opset < 13 else (_ints(values[1]) if len(values) > 1 and values[1] is not None
                                                     else None)  # fmt: skip
        return [np.squeeze(x, axis=None if axes is None else tuple(a % x.ndim for a in axes))]
    if op == "Concat":
        return [np.concatenate([_array(v) for v in values], axis=int(attrs.get("axis", 0)))]
    if op == "Slice" and opset >= 10:
        starts, ends = _ints(values[1]), _ints(values[2])
        axes = _ints(values[3]) if len(values) > 3 and values[3] is not None else list(range(len(starts)))
        steps = _ints(values[4]) if len(values) > 4 and values[4] is not None else [1] * len(starts)
        key = [slice(None)] * x.ndim
        for s, e, a, st in zip(starts, ends, axes, steps):
            key[a % x.ndim] = slice(s, e, st)
        return [x[tuple(key)]]
    if op == "Reshape":
        target = _ints(values[1])
        target = [x.shape[k] if d == 0 and not attrs.get("allowzero", 0) else d for k, d in enumerate(target)]
        return [x.reshape(target)]
    if op in ("Add", "Sub", "Mul", "Div", "Mod", "Max", "Min") and len(values) == 2:
        a, b = _array(values[0]), _array(values[1])
        fn = {
            "Add": lambda p, q: p + q,
            "Sub": lambda p, q: p - q,
            "Mul": lambda p, q: p * q,
            "Div": _trunc_div,
            "Mod": lambda p, q: p % q,
            "Max": lambda p, q: as_dim(as_expr(p).max(q)),  # (Expr's min and max keep ints ints)
            "Min": lambda p, q: as_dim(as_expr(p).min(q)),
        }[op]
        return [_array(np.frompyfunc(fn, 2, 1)(a, b))]
    if op in _COMPARISONS:
        decided = _array(np.frompyfunc(_COMPARISONS[op], 2, 1)(_array(values[0]), _array(values[1])))
        if any(v is None for v in np.asarray(decided).reshape(-1)):
            return None
        return [np.asarray(decided, dtype=bool)]
    if op == "Where":
        cond = np.asarray(values[0])
        if cond.dtype != bool:
            return None
        return [_array(np.where(cond, _array(values[1]), _array(values[2])))]
    return None
