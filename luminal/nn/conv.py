"""Conv1d and Conv2d with torch.nn's parameters: weight [out, in / groups, *kernel], bias [out]."""

from __future__ import annotations

from typing import Any, Sequence

from luminal import dtypes as dt
from luminal import functional as F
from luminal.nn.module import Module
from luminal.tensor import Tensor

IntOrTuple = int | Sequence[int]


def _ntuple(v: IntOrTuple, n: int) -> tuple[int, ...]:
    return (v,) * n if isinstance(v, int) else tuple(v)


class _ConvNd(Module):
    dims = 0  # spatial dims, set by the subclasses

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: Any = 0,
        dilation: IntOrTuple = 1,
        groups: int = 1,
        bias: bool = True,
        dtype: Any = dt.float32,
    ) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{type(self).__name__}: {groups} groups must divide {in_channels} and {out_channels}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _ntuple(kernel_size, self.dims)
        self.stride, self.padding, self.dilation, self.has_bias = stride, padding, dilation, bias
        self.declare("weight", (out_channels, in_channels // groups, *self.kernel_size), dtype)
        if bias:
            self.declare("bias", (out_channels,), dtype)

    def _conv(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        bias = self.param(x.graph, "bias") if self.has_bias else None
        return self._conv(x, self.param(x.graph, "weight"), bias)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, bias={self.has_bias}"
        )


class Conv1d(_ConvNd):
    dims = 1

    def _conv(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return F.conv1d(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    dims = 2

    def _conv(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)
