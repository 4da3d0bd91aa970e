"""torch.export's symbolic sizes as luminal symbols: each input dim torch made dynamic becomes `lm.sym` with
torch's range, named after the user's `torch.export.Dim` when `dynamic_shapes` gives one."""

from __future__ import annotations

import re
from typing import Any, Sequence

import torch

from luminal.symbolic import Dim, sym
from luminal.symbolic.expr import DEFAULT_MAX
from luminal.torch.errors import TorchImportError

_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


def dim_names(dynamic_shapes: Any, input_names: Sequence[str], metas: Sequence[Any]) -> dict[Any, str]:
    """{sympy symbol: the name of the user's Dim} for the user inputs' dims that `dynamic_shapes` names.

    `dynamic_shapes` is torch.export's argument: a dict by argument name or a sequence by position, each
    entry a dict {axis: Dim} or a sequence of Dim/None per axis. Dims without a name (Dim.AUTO) are absent.
    """
    found: dict[Any, str] = {}
    if dynamic_shapes is None:
        return found
    for position, (name, meta) in enumerate(zip(input_names, metas)):
        if isinstance(dynamic_shapes, dict):
            spec = dynamic_shapes.get(name)
        else:
            spec = dynamic_shapes[position] if position < len(dynamic_shapes) else None
        if not isinstance(spec, (dict, list, tuple)) or not isinstance(meta, torch.Tensor):
            continue
        axes = spec.items() if isinstance(spec, dict) else enumerate(spec)
        for axis, dim in axes:
            label = getattr(dim, "__name__", None)
            size = meta.shape[axis]
            if isinstance(label, str) and isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                found[size.node.expr] = label
    return found


def input_shape(meta: torch.Tensor, names: dict[Any, str], ranges: dict[Any, Any], where: str) -> list[Dim]:
    """An input's shape with each symbolic size as a luminal symbol carrying torch's value range."""
    shape: list[Dim] = []
    for size in meta.shape:
        if isinstance(size, int) or not isinstance(size, torch.SymInt):
            shape.append(int(size))
            continue
        expr = size.node.expr
        if not expr.is_Symbol:
            raise TorchImportError(f"input {where}: size {expr} is an expression of other sizes, not one symbol")
        bounds = ranges.get(expr)
        low = int(bounds.lower) if bounds is not None and bounds.lower.is_finite else 1
        high = int(bounds.upper) if bounds is not None and bounds.upper.is_finite else DEFAULT_MAX
        name = _NOT_NAME.sub("_", names.get(expr, str(expr)))
        shape.append(sym(name if name[:1].isalpha() else f"d_{name}", max(low, 1), min(high, DEFAULT_MAX)))
    return shape
