"""Reductions, scans and softmax."""

from __future__ import annotations

import luminal.functional as F
from luminal.torch.call import Call
from luminal.torch.dtypes import optional
from luminal.torch.registry import translates


def _dims(c: Call):
    """ATen's dim list: None or [] reduces every dim (an empty list means "all" in ATen's sum and mean)."""
    dim = c.get("dim")
    return None if dim is None or (isinstance(dim, (list, tuple)) and not dim) else dim


@translates("aten.sum")
def sum_(c: Call):
    return F.sum(c["self"], _dims(c), keepdim=bool(c.get("keepdim", False)), dtype=optional(c.get("dtype"), c.name))


@translates("aten.mean")
def mean(c: Call):
    return F.mean(c["self"], _dims(c), keepdim=bool(c.get("keepdim", False)), dtype=optional(c.get("dtype"), c.name))


@translates("aten.prod")
def prod(c: Call):
    return F.prod(
        c["self"], c.get("dim"), keepdim=bool(c.get("keepdim", False)), dtype=optional(c.get("dtype"), c.name)
    )


@translates("aten.amax")
def amax(c: Call):
    return F.amax(c["self"], _dims(c), keepdim=bool(c["keepdim"]))


@translates("aten.amin")
def amin(c: Call):
    return F.amin(c["self"], _dims(c), keepdim=bool(c["keepdim"]))


@translates("aten.max.dim")
def max_dim(c: Call):
    values, indices = F.max(c["self"], c["dim"], keepdim=bool(c["keepdim"]))
    return values, indices


@translates("aten.min.dim")
def min_dim(c: Call):
    values, indices = F.min(c["self"], c["dim"], keepdim=bool(c["keepdim"]))
    return values, indices


@translates("aten.max.default")
def max_all(c: Call):
    return F.amax(c["self"])


@translates("aten.min.default")
def min_all(c: Call):
    return F.amin(c["self"])


@translates("aten.argmax")
def argmax(c: Call):
    return F.argmax(c["self"], c.get("dim"), keepdim=bool(c["keepdim"]))


@translates("aten.argmin")
def argmin(c: Call):
    return F.argmin(c["self"], c.get("dim"), keepdim=bool(c["keepdim"]))


@translates("aten.any")
def any_(c: Call):
    return F.any(c["self"], _dims(c), keepdim=bool(c.get("keepdim", False)))


@translates("aten.all")
def all_(c: Call):
    return F.all(c["self"], _dims(c), keepdim=bool(c.get("keepdim", False)))


def _correction(c: Call):
    """Bessel's correction from either form: `correction=` (None means 1) or the older `unbiased=`."""
    if "unbiased" in c.args:
        return 1 if c.get("unbiased", True) else 0
    return c.get("correction", 1)


@translates("aten.var")
def var(c: Call):
    return F.var(c["self"], _dims(c), keepdim=bool(c.get("keepdim", False)), correction=_correction(c))


@translates("aten.cumsum")
def cumsum(c: Call):
    return F.cumsum(c["self"], c["dim"], dtype=optional(c.get("dtype"), c.name))


@translates("aten.logsumexp")
def logsumexp(c: Call):
    return F.logsumexp(c["self"], c["dim"], keepdim=bool(c["keepdim"]))


@translates("aten._softmax")
def softmax(c: Call):
    if c["half_to_float"]:
        raise c.unsupported("half_to_float=True is not supported")
    return F.softmax(c["self"], c["dim"])


@translates("aten._safe_softmax")
def safe_softmax(c: Call):
    # softmax whose fully masked rows (all -inf) give zeros instead of NaN
    x = c["self"]
    y = F.softmax(x, c["dim"], dtype=optional(c.get("dtype"), c.name))
    masked = F.all(F.eq(x, float("-inf")), c["dim"], keepdim=True)
    return F.where(masked, 0.0, y)


@translates("aten._log_softmax")
def log_softmax(c: Call):
    if c["half_to_float"]:
        raise c.unsupported("half_to_float=True is not supported")
    return F.log_softmax(c["self"], c["dim"])


@translates("aten.var_mean")
def var_mean(c: Call):
    v, m = F.var_mean(c["self"], _dims(c), keepdim=bool(c.get("keepdim", False)), correction=_correction(c))
    return v, m


@translates("aten.std")
def std(c: Call):
    return F.std(c["self"], _dims(c), keepdim=bool(c.get("keepdim", False)), correction=_correction(c))


@translates("aten.linalg_vector_norm")
def vector_norm(c: Call):
    return F.norm(c["self"], c["ord"], _dims(c), keepdim=bool(c["keepdim"]), dtype=optional(c.get("dtype"), c.name))


@translates("aten.cumprod")
def cumprod(c: Call):
    return F.cumprod(c["self"], c["dim"], dtype=optional(c.get("dtype"), c.name))
