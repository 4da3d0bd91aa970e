"""Tensors made from sizes and values alone. Their dtype is torch's, read off the node's metadata, since
ATen leaves it to torch's inference when `dtype=` is omitted (a bool fill makes a bool tensor)."""

from __future__ import annotations

import luminal.functional as F
from luminal.torch.call import Call
from luminal.torch.dtypes import from_torch
from luminal.torch.registry import translates


def _dtype(c: Call):
    if c.get("dtype") is not None:
        return from_torch(c["dtype"], c.name)
    if c.meta is None:
        raise c.error("the node has no dtype in its metadata and no dtype= argument")
    return from_torch(c.meta.dtype, c.name)


@translates("aten.full.default")
def full(c: Call):
    return F.full(c.graph, list(c["size"]), c["fill_value"], dtype=_dtype(c))


@translates("aten.zeros.default")
def zeros(c: Call):
    return F.full(c.graph, list(c["size"]), 0, dtype=_dtype(c))


@translates("aten.ones.default")
def ones(c: Call):
    return F.full(c.graph, list(c["size"]), 1, dtype=_dtype(c))


@translates("aten.scalar_tensor")
def scalar_tensor(c: Call):
    return F.full(c.graph, [], c["s"], dtype=_dtype(c))


@translates("aten.full_like")
def full_like(c: Call):
    return F.full_like(c["self"], c["fill_value"], dtype=_dtype(c))


@translates("aten.zeros_like")
def zeros_like(c: Call):
    return F.full_like(c["self"], 0, dtype=_dtype(c))


@translates("aten.ones_like")
def ones_like(c: Call):
    return F.full_like(c["self"], 1, dtype=_dtype(c))


@translates("aten.new_zeros")
def new_zeros(c: Call):
    return F.full(c.graph, list(c["size"]), 0, dtype=_dtype(c))


@translates("aten.new_ones")
def new_ones(c: Call):
    return F.full(c.graph, list(c["size"]), 1, dtype=_dtype(c))


@translates("aten.new_full")
def new_full(c: Call):
    return F.full(c.graph, list(c["size"]), c["fill_value"], dtype=_dtype(c))


@translates("aten.arange")
def arange(c: Call):
    start, end = (c.get("start", 0), c["end"]) if "start" in c.args else (0, c["end"])
    return F.arange(c.graph, start, end, c.get("step", 1), dtype=_dtype(c))
