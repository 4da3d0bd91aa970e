"""Symbolic dimensions: `sym("batch")` is a dimension whose value is known only at run time."""

from __future__ import annotations

import keyword
import re

from luminal.symbolic.expr import (
    DEFAULT_MAX,
    Dim,
    Expr,
    ExprLike,
    SymbolicError,
    as_dim,
    as_expr,
    const,
    expr_from_json,
    var,
)
from luminal.symbolic.render import c_prelude

MAX_SYMBOL_CHARS = 64  # symbol names become C identifiers in kernels: short, like any variable name
_NAME = re.compile(rf"^[A-Za-z][A-Za-z0-9_]{{0,{MAX_SYMBOL_CHARS - 1}}}$")
# Names that would not survive rendering into C, CUDA or Metal source.
_RESERVED = {"auto", "char", "const", "double", "float", "int", "long", "short", "signed", "unsigned", "void"}


def sym(name: str, min: int = 1, max: int = DEFAULT_MAX) -> Expr:  # noqa: A002 - mirrors the range it sets
    """A named symbolic dimension with an inclusive value range (used for bounds and compile buckets)."""
    if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name) or name in _RESERVED:
        raise SymbolicError(
            f"symbol name {name!r:.80} must be a letter then up to {MAX_SYMBOL_CHARS - 1} letters, digits or '_', "
            "not a keyword"
        )
    return var(name, int(min), int(max))


def smin(a: ExprLike, b: ExprLike) -> Expr:
    return as_expr(a).min(b)


def smax(a: ExprLike, b: ExprLike) -> Expr:
    return as_expr(a).max(b)


def is_symbolic(d: ExprLike) -> bool:
    return isinstance(d, Expr) and not d.is_const


__all__ = [
    "Dim",
    "Expr",
    "ExprLike",
    "MAX_SYMBOL_CHARS",
    "SymbolicError",
    "as_dim",
    "as_expr",
    "c_prelude",
    "const",
    "expr_from_json",
    "is_symbolic",
    "smax",
    "smin",
    "sym",
    "var",
]
