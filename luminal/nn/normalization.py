"""LayerNorm, RMSNorm and inference BatchNorm with torch.nn's parameter and buffer names.

BatchNorm's running statistics are graph weights too (torch keeps them as buffers in the same state dict);
its `num_batches_tracked` counter only matters for training, so it is not declared and `bind` skips it.
"""

from __future__ import annotations

from typing import Any, Sequence

from luminal import dtypes as dt
from luminal import functional as F
from luminal.nn.module import Module
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing `normalized_shape` (torch.nn.LayerNorm)."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        dtype: Any = dt.float32,
    ) -> None:
        super().__init__()
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.affine, self.has_bias = elementwise_affine, elementwise_affine and bias
        if self.affine:
            self.declare("weight", self.normalized_shape, dtype)
        if self.has_bias:
            self.declare("bias", self.normalized_shape, dtype)

    def forward(self, x: Tensor) -> Tensor:
        weight = self.param(x.graph, "weight") if self.affine else None
        bias = self.param(x.graph, "bias") if self.has_bias else None
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.affine}"


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight (torch.nn.RMSNorm, and Llama's RMSNorm: both compute in float32)."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        dtype: Any = dt.float32,
    ) -> None:
        super().__init__()
        self.normalized_shape, self.eps, self.affine = _shape(normalized_shape), eps, elementwise_affine
        if self.affine:
            self.declare("weight", self.normalized_shape, dtype)

    def forward(self, x: Tensor) -> Tensor:
        weight = self.param(x.graph, "weight") if self.affine else None
        return F.rms_norm(x, self.normalized_shape, weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.affine}"


class _BatchNorm(Module):
    """Inference batch norm over dim 1 of [N, C, *] from the running statistics (torch.nn.BatchNormNd.eval())."""

    spatial_dims: tuple[int, ...] = ()  # the input ranks the torch class accepts

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True, dtype: Any = dt.float32) -> None:
        super().__init__()
        self.num_features, self.eps, self.affine = num_features, eps, affine
        if affine:
            self.declare("weight", (num_features,), dtype)
            self.declare("bias", (num_features,), dtype)
        self.declare("running_mean", (num_features,), dtype)
        self.declare("running_var", (num_features,), dtype)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self.spatial_dims or x.shape[1] != self.num_features:
            raise ShapeError(
                f"{type(self).__name__}({self.num_features}): expected a rank in {self.spatial_dims} with "
                f"{self.num_features} channels at dim 1, got {format_shape(x.shape)}"
            )
        g = x.graph
        weight, bias = (self.param(g, "weight"), self.param(g, "bias")) if self.affine else (None, None)
        mean, var = self.param(g, "running_mean"), self.param(g, "running_var")
        return F.batch_norm(x, mean, var, weight, bias, training=False, eps=self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, affine={self.affine}"


class BatchNorm1d(_BatchNorm):
    spatial_dims = (2, 3)  # [N, C] or [N, C, L]


class BatchNorm2d(_BatchNorm):
    spatial_dims = (4,)  # [N, C, H, W]
