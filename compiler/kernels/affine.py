"""Affine index expressions: `offset + sum(coefficient * v)` over chosen variables.

The GEMM generator reads an operand in place when its index is affine in the contraction and row variables
(a strided matrix) instead of copying it into panels; this finds the strides, or says it is not so.
"""

from __future__ import annotations

from typing import Sequence

from luminal.symbolic import Expr, var


def affine(e: Expr, names: Sequence[str]) -> tuple[Expr, dict[str, Expr]] | None:
    """(offset, coefficients) with e == offset + sum(coefficients[n] * n for n in names), offset and coefficients
    free of `names`; None when `e` is not of that form (a division, a modulo or a product of two of them)."""
    zero = {n: 0 for n in names}
    offset = e.substitute(zero)
    coefficients = {n: e.substitute({**zero, n: 1}) - offset for n in names}
    rebuilt = offset
    for n, c in coefficients.items():
        rebuilt = rebuilt + var(n) * c
    return (offset, coefficients) if rebuilt == e else None
