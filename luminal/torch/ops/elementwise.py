"""Elementwise ATen operators: each is the luminal high-level op of the same meaning."""

from __future__ import annotations

import luminal.functional as F
from luminal.torch.call import Call, Unavailable
from luminal.torch.registry import translates

# ATen unary operators whose luminal function has the same meaning and takes the tensor alone.
_UNARY = {
    "abs": F.abs,
    "neg": F.neg,
    "exp": F.exp,
    "exp2": F.exp2,
    "log": F.log,
    "log2": F.log2,
    "log10": F.log10,
    "log1p": F.log1p,
    "expm1": F.expm1,
    "sqrt": F.sqrt,
    "rsqrt": F.rsqrt,
    "reciprocal": F.reciprocal,
    "sin": F.sin,
    "cos": F.cos,
    "tan": F.tan,
    "tanh": F.tanh,
    "erf": F.erf,
    "sigmoid": F.sigmoid,
    "relu": F.relu,
    "silu": F.silu,
    "mish": F.mish,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "log_sigmoid": F.logsigmoid,
    "sign": F.sign,
    "floor": F.floor,
    "ceil": F.ceil,
    "trunc": F.trunc,
    "frac": F.frac,
    "logical_not": F.logical_not,
    "bitwise_not": F.bitwise_not,
    "isnan": F.isnan,
    "isinf": F.isinf,
}


def _unary(fn):
    return lambda c: fn(c["self"])


for _name, _fn in _UNARY.items():
    translates(f"aten.{_name}")(_unary(_fn))


# ATen binary operators (self, other) with the same meaning in luminal; torch's type promotion is luminal's.
_BINARY = {
    "mul": F.mul,
    "maximum": F.maximum,
    "minimum": F.minimum,
    "eq": F.eq,
    "ne": F.ne,
    "lt": F.lt,
    "le": F.le,
    "gt": F.gt,
    "ge": F.ge,
    "logical_and": F.logical_and,
    "logical_or": F.logical_or,
    "logical_xor": F.logical_xor,
    "bitwise_and": F.bitwise_and,
    "bitwise_or": F.bitwise_or,
    "bitwise_xor": F.bitwise_xor,
    "fmod": F.fmod,
    "remainder": F.remainder,
    "floor_divide": F.floor_divide,
}


def _binary(fn):
    return lambda c: fn(c["self"], c["other"])


for _name, _fn in _BINARY.items():
    translates(f"aten.{_name}")(_binary(_fn))


@translates("aten.add")
def add(c: Call):
    return F.add(c["self"], c["other"], alpha=c.get("alpha", 1))


@translates("aten.sub")
def sub(c: Call):
    return F.sub(c["self"], c["other"], alpha=c.get("alpha", 1))


@translates("aten.rsub")
def rsub(c: Call):  # other - alpha * self
    return F.sub(c["other"], c["self"], alpha=c.get("alpha", 1))


@translates("aten.div")
def div(c: Call):
    return F.div(c["self"], c["other"], rounding_mode=c.get("rounding_mode"))


@translates("aten.pow")
def pow_(c: Call):
    return F.pow(c["self"], c["exponent"])


@translates("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def where(c: Call):
    return F.where(c["condition"], c["self"], c["other"])


@translates("aten.clamp", "aten.clip")
def clamp(c: Call):
    return F.clamp(c["self"], c["min"], c["max"])


@translates("aten.clamp_min")
def clamp_min(c: Call):
    return F.clamp(c["self"], min=c["min"])


@translates("aten.clamp_max")
def clamp_max(c: Call):
    return F.clamp(c["self"], max=c["max"])


@translates("aten.gelu")
def gelu(c: Call):
    return F.gelu(c["self"], approximate=c.get("approximate", "none"))


@translates("aten.hardtanh")
def hardtanh(c: Call):
    return F.hardtanh(c["self"], c["min_val"], c["max_val"])


@translates("aten.leaky_relu")
def leaky_relu(c: Call):
    return F.leaky_relu(c["self"], c["negative_slope"])


@translates("aten.elu")
def elu(c: Call):
    # ATen's elu carries scale and input_scale (selu and celu are elu with them set): the general form.
    x, alpha, scale, input_scale = c["self"], c["alpha"], c["scale"], c["input_scale"]
    negative = F.mul(F.expm1(F.mul(x, input_scale)), alpha)
    return F.mul(F.where(F.gt(x, 0), x, negative), scale)


@translates("aten.softplus")
def softplus(c: Call):
    return F.softplus(c["self"], c["beta"], c["threshold"])


@translates("aten.lerp")
def lerp(c: Call):
    return F.lerp(c["self"], c["end"], c["weight"])


@translates("aten.round.default")
def round_(c: Call):
    return F.round(c["self"])


@translates("aten.round.decimals")
def round_decimals(c: Call):
    return F.round(c["self"], decimals=c["decimals"])


@translates("aten.log_sigmoid_forward")
def log_sigmoid_forward(c: Call):
    return F.logsigmoid(c["self"]), Unavailable("log_sigmoid_forward's buffer")
