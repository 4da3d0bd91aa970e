"""Sizes: `sym_size` reads a (possibly symbolic) size off a tensor, Python operators do arithmetic on sizes
(luminal `Expr`s when symbolic), and torch's run-time assertions on sizes and metadata are dropped: luminal
checks its inputs' shapes against the graph's symbols and their ranges when it runs."""

from __future__ import annotations

import operator

from luminal.torch.call import Call
from luminal.torch.registry import translates


@translates("aten.sym_size.int")
def sym_size(c: Call):
    return c["self"].shape[c["dim"]]


@translates("aten.sym_numel")
def sym_numel(c: Call):
    return c["self"].numel()


_ARITHMETIC = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
}


def _arithmetic(fn):
    return lambda c: fn(c[0], c[1])


for _name, _fn in _ARITHMETIC.items():
    translates(f"operator.{_name}")(_arithmetic(_fn))


@translates("operator.neg")
def neg(c: Call):
    return -c[0]


@translates("operator.getitem")
def getitem(c: Call):
    """An element of a multi-output op's result (native_layer_norm's output 0, split's pieces)."""
    return c[0][c[1]]


@translates(
    "aten._assert_tensor_metadata",
    "aten._assert_scalar",
    "aten.sym_constrain_range_for_size",
    "aten.sym_constrain_range",
)
def assertion(c: Call):
    return None
