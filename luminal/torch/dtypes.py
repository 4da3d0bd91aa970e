"""torch dtypes as luminal dtypes; anything luminal does not carry is refused by name."""

from __future__ import annotations

from typing import Any

import torch

from luminal import dtypes as dt
from luminal.torch.errors import TorchImportError

_TO_LUMINAL = {
    torch.float32: dt.float32,
    torch.float64: dt.float64,
    torch.float16: dt.float16,
    torch.bfloat16: dt.bfloat16,
    torch.int8: dt.int8,
    torch.int16: dt.int16,
    torch.int32: dt.int32,
    torch.int64: dt.int64,
    torch.uint8: dt.uint8,
    torch.uint16: dt.uint16,
    torch.uint32: dt.uint32,
    torch.uint64: dt.uint64,
    torch.bool: dt.bool_,
}
_TO_TORCH = {v: k for k, v in _TO_LUMINAL.items()}


def from_torch(dtype: torch.dtype, where: str = "") -> dt.DType:
    if dtype not in _TO_LUMINAL:
        names = ", ".join(str(d).removeprefix("torch.") for d in _TO_LUMINAL)
        raise TorchImportError(f"{where or 'tensor'}: dtype {dtype} is not supported (luminal carries {names})")
    return _TO_LUMINAL[dtype]


def to_torch(dtype: dt.DType) -> torch.dtype:
    return _TO_TORCH[dtype]


def optional(dtype: Any, where: str) -> dt.DType | None:
    """An ATen `dtype=` argument: None stays None (the op's default)."""
    return None if dtype is None else from_torch(dtype, where)
