"""The table of ONNX operators the importer translates: op type -> translator and the attributes it honours.

A translator takes a `NodeContext` and returns the node's outputs: a luminal Tensor, a numpy array (a value
known at import, such as Shape of a concrete tensor), or a tuple of those with None for outputs it does not
produce. Attributes outside `attrs` make the import fail with a message naming them, so an attribute the
translator would silently ignore can never change a result unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

Translator = Callable[[Any], Any]


@dataclass(frozen=True)
class Entry:
    op_type: str
    translate: Translator
    attrs: frozenset[str]


OPS: dict[str, Entry] = {}


def translates(*op_types: str, attrs: Iterable[str] = ()) -> Callable[[Translator], Translator]:
    """Register the decorated function as the translator of `op_types`: a bare name is in ONNX's default
    domain, another domain's operator is written "domain.Name" (as "ai.onnx.preview.FlexAttention")."""

    def register(fn: Translator) -> Translator:
        for op in op_types:
            if op in OPS:
                raise RuntimeError(f"ONNX operator {op} is registered twice")
            OPS[op] = Entry(op, fn, frozenset(attrs))
        return fn

    return register


def supported_operators() -> list[str]:
    """The ONNX operator types the importer translates, sorted."""
    from luminal.onnx import ops  # noqa: F401  (importing the translator modules fills OPS)

    return sorted(OPS)
