"""Movement and copy operators: views in luminal (no node), or the identity for copies and aliases."""

from __future__ import annotations

import luminal.functional as F
from luminal.torch.call import Call
from luminal.torch.dtypes import from_torch
from luminal.torch.registry import translates

# ATen's "to the end" for slice's end and split's sizes is INT64_MAX; luminal clamps any end past the size.
_TO_END = 2**63 - 1


def _axis(x, dim: int) -> int:
    return dim + x.ndim if dim < 0 else dim


@translates("aten.view", "aten._unsafe_view", "aten.reshape")
def view(c: Call):
    return F.reshape(c["self"], list(c["size"] if "size" in c.args else c["shape"]))


@translates("aten.permute")
def permute(c: Call):
    return F.permute(c["self"], list(c["dims"]))


@translates("aten.transpose.int")
def transpose(c: Call):
    return F.transpose(c["self"], c["dim0"], c["dim1"])


@translates("aten.t")
def t(c: Call):
    return F.t(c["self"])


@translates("aten.expand")
def expand(c: Call):
    x, size = c["self"], list(c["size"])
    # -1 keeps the input's size; torch puts new dims in front, so line the sizes up from the right.
    lead = len(size) - x.ndim
    shape = [x.shape[i - lead] if isinstance(s, int) and s == -1 else s for i, s in enumerate(size)]
    return F.expand(x, shape)


@translates("aten.unsqueeze")
def unsqueeze(c: Call):
    return F.unsqueeze(c["self"], c["dim"])


@translates("aten.squeeze")
def squeeze(c: Call):
    return F.squeeze(c["self"], c.get("dim"))


@translates("aten.select.int")
def select(c: Call):
    return F.select(c["self"], c["dim"], c["index"])


@translates("aten.slice.Tensor")
def slice_(c: Call):
    x = c["self"]
    d = _axis(x, c["dim"])
    start, end, step = c.get("start", 0), c.get("end", _TO_END), c["step"]
    if isinstance(end, int) and end >= _TO_END:
        end = None
    key = [slice(None)] * d + [slice(start, end, step)]
    return x[tuple(key)]


@translates("aten.narrow")
def narrow(c: Call):
    return F.narrow(c["self"], c["dim"], c["start"], c["length"])


@translates("aten.cat")
def cat(c: Call):
    return F.cat(list(c["tensors"]), c["dim"])


@translates("aten.stack")
def stack(c: Call):
    return F.stack(list(c["tensors"]), c["dim"])


@translates("aten.split.Tensor")
def split(c: Call):
    return F.split(c["self"], c["split_size"], c["dim"])


@translates("aten.split_with_sizes")
def split_with_sizes(c: Call):
    return F.split(c["self"], list(c["split_sizes"]), c["dim"])


@translates("aten.unbind.int")
def unbind(c: Call):
    return F.unbind(c["self"], c["dim"])


@translates("aten.flip")
def flip(c: Call):
    return F.flip(c["self"], list(c["dims"]))


@translates("aten.roll")
def roll(c: Call):
    dims = list(c["dims"]) or None
    return F.roll(c["self"], list(c["shifts"]), dims)


@translates("aten.repeat")
def repeat(c: Call):
    return F.repeat(c["self"], list(c["repeats"]))


@translates("aten.constant_pad_nd")
def constant_pad_nd(c: Call):
    pad = list(c["pad"])
    if any(isinstance(p, int) and p < 0 for p in pad):
        raise c.unsupported("negative padding (cropping) is not supported")
    return F.pad(c["self"], pad, value=float(c["value"]))


@translates("aten.clone", "aten.alias", "aten.detach", "aten.lift_fresh_copy", "aten.contiguous")
def identity(c: Call):
    """Copies and aliases: a luminal value is never mutated, so a copy is the value itself."""
    return c["self"]


@translates("aten._to_copy", "aten.to.dtype")
def to_copy(c: Call):
    dtype = c.get("dtype")
    return c["self"] if dtype is None else F.cast(c["self"], from_torch(dtype, c.name))


@translates("aten.type_as")
def type_as(c: Call):
    return F.cast(c["self"], c["other"].dtype)


@translates("aten.copy")
def copy(c: Call):
    """`self` overwritten by `src` (broadcast and cast to self's shape and dtype): a functional copy_."""
    x = c["self"]
    return F.cast(F.expand(c["src"], list(x.shape)), x.dtype)


@translates("aten.pad")
def pad(c: Call):
    mode = c.get("mode", "constant")
    if mode == "constant":
        return F.pad(c["self"], list(c["pad"]), value=float(c.get("value", 0.0)))
    return F.pad(c["self"], list(c["pad"]), mode=mode)


def _padding_mode(mode: str):
    def translate(c: Call):
        return F.pad(c["self"], list(c["padding"]), mode=mode)

    return translate


for _nd in (1, 2, 3):
    translates(f"aten.reflection_pad{_nd}d")(_padding_mode("reflect"))
    translates(f"aten.replication_pad{_nd}d")(_padding_mode("replicate"))
