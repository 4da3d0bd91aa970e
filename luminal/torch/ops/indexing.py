"""Indexing, gathering and masking."""

from __future__ import annotations

import luminal.functional as F
from luminal.torch.call import Call
from luminal.torch.registry import translates


@translates("aten.index.Tensor")
def index(c: Call):
    # x[i0, i1, ...] with None meaning "the whole axis": torch's advanced indexing, which getitem implements.
    key = tuple(slice(None) if i is None else i for i in c["indices"])
    return c["self"][key]


@translates("aten.index_select")
def index_select(c: Call):
    return F.index_select(c["self"], c["dim"], c["index"])


@translates("aten.gather")
def gather(c: Call):
    return F.gather(c["self"], c["dim"], c["index"])


@translates("aten.embedding")
def embedding(c: Call):
    # padding_idx only changes the gradient; the forward pass is a plain row lookup.
    return F.embedding(c["indices"], c["weight"])


@translates("aten.masked_fill")
def masked_fill(c: Call):
    return F.masked_fill(c["self"], c["mask"], c["value"])


@translates("aten.tril")
def tril(c: Call):
    return F.tril(c["self"], c["diagonal"])


@translates("aten.triu")
def triu(c: Call):
    return F.triu(c["self"], c["diagonal"])


@translates("aten.scatter_add")
def scatter_add(c: Call):
    return F.scatter_add(c["self"], c["dim"], c["index"], c["src"])


@translates("aten.one_hot")
def one_hot(c: Call):
    return F.one_hot(c["self"], c["num_classes"])


@translates("aten.index_put")
def index_put(c: Call):
    indices = list(c["indices"])
    if any(i is None for i in indices):
        raise c.unsupported("an index list with whole-axis (None) entries is not supported")
    return F.index_put(c["self"], indices, c["values"], accumulate=bool(c["accumulate"]))


@translates("aten.scatter.src", "aten.scatter.value")
def scatter(c: Call):
    if "src" in c.args:
        return F.scatter(c["self"], c["dim"], c["index"], c["src"])
    return F.scatter(c["self"], c["dim"], c["index"], value=c["value"])
