"""Pooling modules (no parameters): torch.nn's constructors over luminal.functional's pools."""

from __future__ import annotations

from typing import Any

from luminal import functional as F
from luminal.nn.module import Module
from luminal.tensor import Tensor


class _Pool(Module):
    """Keeps the constructor's keyword arguments and passes them to the functional pool."""

    pool: Any = None  # the luminal.functional pool, set by each subclass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.args, self.kwargs = args, kwargs

    def forward(self, x: Tensor) -> Tensor:
        return type(self).pool(x, *self.args, **self.kwargs)

    def extra_repr(self) -> str:
        return ", ".join([*map(repr, self.args), *(f"{k}={v!r}" for k, v in self.kwargs.items())])


class MaxPool1d(_Pool):
    pool = staticmethod(F.max_pool1d)


class MaxPool2d(_Pool):
    pool = staticmethod(F.max_pool2d)


class AvgPool1d(_Pool):
    pool = staticmethod(F.avg_pool1d)


class AvgPool2d(_Pool):
    pool = staticmethod(F.avg_pool2d)


class AdaptiveAvgPool1d(_Pool):
    pool = staticmethod(F.adaptive_avg_pool1d)


class AdaptiveAvgPool2d(_Pool):
    pool = staticmethod(F.adaptive_avg_pool2d)


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Mean of [batch, seq, dim] over the positions whose mask is 1 (sentence-transformers' mean pooling).

    The mask's count is clamped to 1e-9 as sentence-transformers does, so an all-padding row gives 0, not nan.
    """
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # [batch, seq, 1]
    total = (hidden * weights).sum(1)
    return total / weights.sum(1).clamp(min=1e-9)


def last_token_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The state of each row's last position whose mask is 1 (sentence-transformers' lasttoken pooling of a
    right-padded batch): a one-hot weighting at position count - 1, so no gather with run-time indices."""
    positions = hidden.graph.arange(hidden.shape[1])  # [seq] int64
    count = attention_mask.to(positions.dtype).sum(1, keepdim=True)  # [batch, 1]
    last = (positions == count - 1).to(hidden.dtype).unsqueeze(-1)  # [batch, seq, 1]
    return (hidden * last).sum(1)
