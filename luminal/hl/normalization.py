"""Softmax and the normalizations (layer, RMS, group, batch, instance, Lp), following torch.nn.functional.

Half-precision inputs are computed in float32 and the result cast back, as PyTorch's kernels accumulate;
the compiler sees the casts and may fuse them away.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from luminal import dtypes as dt
from luminal.hl import prim
from luminal.symbolic import Dim, as_dim
from luminal.tensor import Tensor
from luminal.view import ShapeError, dims_product, format_shape

LOG2_E = 1 / math.log(2)  # e^x = 2^(x log2 e)
LN_2 = math.log(2)  # ln x = log2(x) ln 2
FLOAT32_EPS = 2.0**-23  # torch.finfo(torch.float32).eps: rms_norm's default eps


def _upcast(x: Tensor, dtype: Any = None) -> tuple[Tensor, dt.DType]:
    """(x in its compute type, the result dtype): half types compute in float32 and cast back; ints give float32;
    float64 stays float64."""
    if dtype is not None:
        x = prim.cast(x, dtype)
    return prim.cast(x, dt.opmath(x.dtype)), x.dtype if x.dtype.is_float else dt.float32


def _param(p: Tensor | None, x: Tensor) -> Tensor | None:
    return None if p is None else prim.cast(p, x.dtype)


def _mean(x: Tensor, dims: Sequence[int]) -> Tensor:
    from luminal.hl import reduction as R

    return R.mean(x, dims, keepdim=True)


# ---- softmax -------------------------------------------------------------------------------------------


def _softmax_dim(x: Tensor, dim: int, op: str) -> int:
    from luminal.hl import reduction as R

    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{op}: dim must be an int, got {dim!r}")
    return R.normalize_dims(x, dim, op)[0]


def softmax(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    """softmax(x) = 2^((x - max) log2 e) / sum(...): max-subtracted so exp2 never overflows."""
    from luminal.hl import elementwise as E
    from luminal.hl import reduction as R

    dim = _softmax_dim(x, dim, "softmax")
    y, out = _upcast(x, dtype)
    shifted = E.sub(y, R.amax(y, dim, keepdim=True))
    e = prim.exp2(E.mul(shifted, LOG2_E))
    return prim.cast(E.mul(e, prim.recip(R.sum(e, dim, keepdim=True))), out)


def log_softmax(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    """log_softmax(x) = (x - max) - ln(sum(e^(x - max)))."""
    from luminal.hl import elementwise as E
    from luminal.hl import reduction as R

    dim = _softmax_dim(x, dim, "log_softmax")
    y, out = _upcast(x, dtype)
    shifted = E.sub(y, R.amax(y, dim, keepdim=True))
    total = R.sum(prim.exp2(E.mul(shifted, LOG2_E)), dim, keepdim=True)
    return prim.cast(E.sub(shifted, E.mul(prim.log2(total), LN_2)), out)


# ---- normalizations over trailing dims --------------------------------------------------------------


def _trailing_dims(op: str, x: Tensor, normalized_shape: int | Sequence[Dim]) -> list[int]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or k > x.ndim or tuple(as_dim(d) for d in x.shape[x.ndim - k :]) != tuple(as_dim(d) for d in shape):
        raise ShapeError(
            f"{op}: normalized_shape {format_shape(shape)} does not match the last dims of {format_shape(x.shape)}"
        )
    return list(range(x.ndim - k, x.ndim))


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    from luminal.hl import elementwise as E

    if weight is not None:
        y = E.mul(y, _param(weight, y))
    return y if bias is None else E.add(y, _param(bias, y))


def _standardize(x: Tensor, dims: Sequence[int], eps: float) -> Tensor:
    """(x - mean) / sqrt(var + eps), with the biased variance mean((x - mean)^2)."""
    from luminal.hl import elementwise as E

    centered = E.sub(x, _mean(x, dims))
    var = _mean(E.mul(centered, centered), dims)
    return E.mul(centered, E.rsqrt(E.add(var, eps)))


def layer_norm(
    x: Tensor,
    normalized_shape: int | Sequence[Dim],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last len(normalized_shape) dims."""
    dims = _trailing_dims("layer_norm", x, normalized_shape)
    y, out = _upcast(x)
    return prim.cast(_affine(_standardize(y, dims, eps), weight, bias), out)


def rms_norm(
    x: Tensor, normalized_shape: int | Sequence[Dim], weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight; eps None means float32's machine epsilon, as in torch."""
    from luminal.hl import elementwise as E

    dims = _trailing_dims("rms_norm", x, normalized_shape)
    y, out = _upcast(x)
    scale = E.rsqrt(E.add(_mean(E.mul(y, y), dims), FLOAT32_EPS if eps is None else eps))
    return prim.cast(_affine(E.mul(y, scale), weight, None), out)


# ---- normalizations over channels (dim 1) ----------------------------------------------------------


def _channel_param(p: Tensor | None, x: Tensor, op: str) -> Tensor | None:
    """A per-channel [C] parameter viewed as [C, 1, ...] so it broadcasts against [N, C, *]."""
    if p is None:
        return None
    if p.ndim != 1 or p.shape[0] != x.shape[1]:
        raise ShapeError(
            f"{op}: expected a [{x.shape[1]}] parameter for input {format_shape(x.shape)}, got {format_shape(p.shape)}"
        )
    return p.with_view(p.st.reshape((p.shape[0], *([1] * (x.ndim - 2)))))


def group_norm(
    x: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """Standardize each [C / G, *] group of [N, C, *] (a reshape to [N, G, rest]), then scale per channel."""
    if x.ndim < 2 or not isinstance(x.shape[1], int) or x.shape[1] % num_groups:
        raise ShapeError(f"group_norm: {num_groups} groups do not divide the channels of {format_shape(x.shape)}")
    y, out = _upcast(x)
    grouped = y.with_view(y.st.reshape((x.shape[0], num_groups, as_dim(dims_product(x.shape[1:]) // num_groups))))
    normed = _standardize(grouped, [2], eps)
    normed = normed.with_view(normed.st.reshape(x.shape))
    return prim.cast(
        _affine(normed, _channel_param(weight, x, "group_norm"), _channel_param(bias, x, "group_norm")), out
    )


def batch_norm(
    x: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Inference batch norm: (x - running_mean) / sqrt(running_var + eps) per channel (dim 1), then affine.

    training=True would also update the running statistics in place, a side effect an inference graph cannot
    express, so it is refused rather than silently computing something else.
    """
    from luminal.hl import elementwise as E

    if training:
        raise NotImplementedError("batch_norm: training=True updates running statistics; graphs are inference-only")
    if running_mean is None or running_var is None:
        raise ValueError("batch_norm: inference needs running_mean and running_var")
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: expected an [N, C, *] input, got {format_shape(x.shape)}")
    y, out = _upcast(x)
    mean = _param(_channel_param(running_mean, x, "batch_norm"), y)
    var = _param(_channel_param(running_var, x, "batch_norm"), y)
    normed = E.mul(E.sub(y, mean), E.rsqrt(E.add(var, eps)))
    return prim.cast(
        _affine(normed, _channel_param(weight, x, "batch_norm"), _channel_param(bias, x, "batch_norm")), out
    )


def instance_norm(
    x: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Standardize each (sample, channel) over its spatial dims; with use_input_stats=False, batch_norm."""
    if not use_input_stats:
        return batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
    if x.ndim < 3:
        raise ShapeError(f"instance_norm: expected an [N, C, *spatial] input, got {format_shape(x.shape)}")
    y, out = _upcast(x)
    normed = _standardize(y, list(range(2, x.ndim)), eps)
    w, b = _channel_param(weight, x, "instance_norm"), _channel_param(bias, x, "instance_norm")
    return prim.cast(_affine(normed, w, b), out)


def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """F.normalize: x / max(||x||_p over dim, eps)."""
    from luminal.hl import comparison as C
    from luminal.hl import elementwise as E
    from luminal.hl import reduction as R

    y, out = _upcast(x)
    norm = R.norm(y, p, dim, keepdim=True)
    return prim.cast(E.mul(y, prim.recip(C.maximum(norm, eps))), out)  # x * 1 / max(norm, eps)


METHODS = ("softmax", "log_softmax")

__all__ = [
    *METHODS,
    "layer_norm",
    "rms_norm",
    "group_norm",
    "batch_norm",
    "instance_norm",
    "normalize",
]
