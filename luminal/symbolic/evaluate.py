"""Evaluation of symbolic expressions on ints or, vectorised, on integer numpy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal.symbolic.expr import ADD, AND, CONST, DIV, LT, MAX, MIN, MOD, MUL, VAR, Expr, SymbolicError


def _all_int(vals) -> bool:
    return all(isinstance(v, int) for v in vals)


def _check_divisor(d: Any, what: str, e: Expr) -> None:
    if (d == 0) if isinstance(d, int) else bool(np.any(d == 0)):
        raise SymbolicError(f"{what} by zero while evaluating {e}")


def evaluate(e: Expr, env: dict[str, Any]) -> Any:
    cache: dict[int, Any] = {}

    def ev(x: Expr) -> Any:
        got = cache.get(id(x))
        if got is not None:
            return got
        op = x.op
        if op == CONST:
            out = x.args[0]
        elif op == VAR:
            try:
                out = env[x.args[0]]
            except KeyError:
                raise SymbolicError(f"symbol {x.args[0]!r} is not bound") from None
            if isinstance(out, (bool, np.integer)):
                out = int(out)
        else:
            vals = [ev(a) for a in x.args]
            if op == ADD:
                out = vals[0]
                for v in vals[1:]:
                    out = out + v
            elif op == MUL:
                out = vals[0]
                for v in vals[1:]:
                    out = out * v
            elif op == DIV:
                _check_divisor(vals[1], "division", x)
                out = vals[0] // vals[1]
            elif op == MOD:
                _check_divisor(vals[1], "remainder", x)
                out = vals[0] % vals[1]
            elif op in (MIN, MAX):
                pick = (min if op == MIN else max) if _all_int(vals) else (np.minimum if op == MIN else np.maximum)
                out = pick(vals[0], vals[1])
            elif op == LT:
                out = int(vals[0] < vals[1]) if _all_int(vals) else (vals[0] < vals[1]).astype(np.int64)
            elif op == AND:
                if _all_int(vals):
                    out = int(bool(vals[0]) and bool(vals[1]))
                else:
                    out = np.logical_and(vals[0] != 0, vals[1] != 0).astype(np.int64)
            else:  # pragma: no cover - Expr only holds known operators
                raise SymbolicError(f"unknown operator {op!r}")
        cache[id(x)] = out
        return out

    return ev(e)
