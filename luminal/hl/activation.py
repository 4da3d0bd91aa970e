"""Activation functions with torch.nn.functional's names, signatures and nan/inf behaviour.

Each is a short composition of element-wise ops. Half-precision inputs compute in float32 and round once
(as torch's CPU kernels do). `inplace=` is accepted for signature compatibility: a recorded graph has no
storage to overwrite, so in-place and out-of-place are the same value.
"""

from __future__ import annotations

import math
from typing import Any

from luminal import dtypes as dt
from luminal.hl import comparison as C
from luminal.hl import elementwise as E
from luminal.hl import prim
from luminal.tensor import Tensor

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
GELU_TANH_SCALE = math.sqrt(2 / math.pi)  # gelu_tanh: tanh(sqrt(2/pi) (x + 0.044715 x^3))


def _float(x: Tensor, op: str) -> None:
    if not x.dtype.is_float:
        raise dt.DTypeError(f"{op} needs a floating-point tensor, got {x.dtype.name} (torch raises too)")


def _bound(x: Tensor, value: float) -> Any:
    return value if x.dtype.is_float else int(value)  # integer inputs keep their dtype (torch casts the bound)


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    if x.dtype == dt.bool_:
        raise dt.DTypeError("relu is not defined on bool tensors")
    return C.maximum(x, _bound(x, 0))  # max(x, 0); nan stays nan


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    return C.clamp(x, _bound(x, min_val), _bound(x, max_val))


def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(x, 0.0, 6.0)  # min(max(x, 0), 6)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    _float(x, "leaky_relu")
    positive = prim.cast(C.gt(x, 0), x.dtype)
    factor = E.add(positive, E.mul(E.sub(1, positive), negative_slope))  # exactly 1 or the slope
    return E.mul(x, factor)  # x > 0 ? x : slope x


def threshold(x: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x where x > threshold, else value (nan stays nan)."""
    limit, fill = _bound(x, threshold), _bound(x, value)
    return C.where(C.le(x, prim.full_like(x, limit)), prim.full_like(x, fill), x)


def sigmoid(x: Tensor) -> Tensor:
    return E.opmath(x, lambda x: E.reciprocal(E.add(E.exp(E.neg(x)), 1)))  # 1 / (1 + e^-x)


def logsigmoid(x: Tensor) -> Tensor:
    _float(x, "logsigmoid")
    # log(sigmoid x) = min(x, 0) - log1p(e^-|x|): never exponentiates a large positive number
    return E.opmath(x, lambda x: E.sub(C.minimum(x, 0.0), E.log1p(E.exp(E.neg(E.abs(x))))))


def silu(x: Tensor, inplace: bool = False) -> Tensor:
    _float(x, "silu")
    return E.opmath(x, lambda x: E.mul(x, sigmoid(x)))  # x sigmoid(x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    _float(x, "gelu")
    if approximate == "none":  # x/2 (1 + erf(x / sqrt 2))
        return E.opmath(x, lambda x: E.mul(E.mul(x, 0.5), E.add(E.erf(E.mul(x, math.sqrt(0.5))), 1)))
    if approximate == "tanh":  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        inner = lambda x: E.mul(E.add(x, E.mul(E.mul(E.square(x), x), 0.044715)), GELU_TANH_SCALE)  # noqa: E731
        return E.opmath(x, lambda x: E.mul(E.mul(x, 0.5), E.add(E.tanh(inner(x)), 1)))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + e^(beta x)) / beta, and x itself once beta x > threshold (where the two agree in float)."""
    _float(x, "softplus")

    def f(x: Tensor) -> Tensor:
        bx = E.mul(x, beta)
        return C.where(C.gt(bx, threshold), x, E.div(E.log1p(E.exp(bx)), beta))

    return E.opmath(x, f)


def elu(
    x: Tensor, alpha: float = 1.0, inplace: bool = False, *, scale: float = 1.0, input_scale: float = 1.0
) -> Tensor:
    """x scale where x > 0, else alpha scale (e^(x input_scale) - 1): torch's shared form of elu/selu/celu."""
    _float(x, "elu")

    def f(x: Tensor) -> Tensor:
        negative = E.mul(E.expm1(E.mul(x, input_scale)), alpha * scale)
        return C.where(C.le(x, 0.0), negative, E.mul(x, scale))

    return E.opmath(x, f)


def selu(x: Tensor, inplace: bool = False) -> Tensor:
    return elu(x, SELU_ALPHA, scale=SELU_SCALE)


def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return elu(x, alpha, input_scale=1 / alpha)  # max(0, x) + min(0, alpha (e^(x/alpha) - 1))


def mish(x: Tensor, inplace: bool = False) -> Tensor:
    _float(x, "mish")
    return E.opmath(x, lambda x: E.mul(x, E.tanh(softplus(x))))  # x tanh(softplus(x))


def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    _float(x, "hardsigmoid")
    return E.opmath(x, lambda x: E.div(relu6(E.add(x, 3.0)), 6.0))  # relu6(x + 3) / 6


def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    _float(x, "hardswish")
    return E.opmath(x, lambda x: E.div(E.mul(x, relu6(E.add(x, 3.0))), 6.0))  # x relu6(x + 3) / 6


def softsign(x: Tensor) -> Tensor:
    return E.opmath(x, lambda x: E.div(x, E.add(E.abs(x), 1)))  # x / (1 + |x|)


def tanhshrink(x: Tensor) -> Tensor:
    return E.opmath(x, lambda x: E.sub(x, E.tanh(x)))  # x - tanh x


def soft_cap(x: Tensor, cap: float) -> Tensor:
    """cap tanh(x / cap) (Gemma's logit soft-capping), as 2 cap sigmoid(2 x / cap) - cap: a handful of ops where
    `tanh` is ~45 (its series near 0 buys relative precision a cap needs only absolutely: within ~1e-7 cap)."""
    return E.opmath(x, lambda x: E.sub(E.mul(sigmoid(E.mul(x, 2.0 / cap)), 2.0 * cap), cap))


METHODS = (
    "relu",
    "relu6",
    "leaky_relu",
    "hardtanh",
    "threshold",
    "sigmoid",
    "logsigmoid",
    "silu",
    "gelu",
    "softplus",
    "elu",
    "selu",
    "celu",
    "mish",
    "hardsigmoid",
    "hardswish",
    "softsign",
    "tanhshrink",
)
DUNDERS: dict[str, str] = {}

__all__ = [*METHODS, "soft_cap"]  # soft_cap: a function only, not a Tensor method
