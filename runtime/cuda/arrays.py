"""The arrays a CUDA run accepts: numpy (or anything numpy converts), and any DLPack array, on the host or the
device. A device array is never copied to the host: its shape and dtype alone bind the symbols, through a
zero-stride numpy stand-in that owns no data."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

DLPACK_HOST = (1, 3)  # kDLCPU, and kDLCUDAHost (pinned host memory): numpy reads both in place


def on_device(x: Any) -> bool:
    """Whether `x` is a DLPack array in device memory (a CuPy array, a CUDA torch tensor...)."""
    if isinstance(x, np.ndarray) or not hasattr(x, "__dlpack_device__"):
        return False
    return int(x.__dlpack_device__()[0]) not in DLPACK_HOST


def host_array(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        return np.from_dlpack(x)  # a CPU torch tensor: no copy
    return np.asarray(x)


def stand_in(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A numpy array of `shape` and `dtype` that owns one element: what shape checks read."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def split(
    inputs: Mapping[str, Any], to_device: Callable[[Any], Any]
) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, np.ndarray]]:
    """(host arrays, device arrays made by `to_device` from DLPack, numpy arrays or stand-ins for every input)."""
    host, device, shapes = {}, {}, {}
    for name, x in inputs.items():
        if on_device(x):
            device[name] = to_device(x)
            shapes[name] = stand_in(tuple(device[name].shape), np.dtype(device[name].dtype))
        else:
            host[name] = shapes[name] = host_array(x)
    return host, device, shapes
