"""Arrays in Metal buffers: the bytes of a shared-storage MTLBuffer seen from the host, and MetalArray, an array
the caller keeps in an MTLBuffer of the executable's device.

Apple GPUs share memory with the CPU, so a shared-storage buffer's contents are host bytes too: reading them is a
numpy view, no copy. A MetalArray is what a run binds in place: a donated input the program writes (compiler/
in_place.py: a KV pool's scatter) given as one is bound where it lies instead of copied into the arena, the
scatter writes it, and the run hands that same MetalArray back as the output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal import dtypes as dt


def storage(d: dt.DType) -> np.dtype:
    """The dtype a buffer's elements are moved as: bfloat16 as its 16 bits."""
    return np.dtype(np.uint16) if d == dt.bfloat16 else np.dtype(d.np)


def host_bytes(buffer: Any) -> np.ndarray:
    """A shared-storage MTLBuffer's bytes, as a writable numpy view (unified memory: no copy)."""
    return np.frombuffer(buffer.contents().as_buffer(buffer.length()), np.uint8)


class MetalArray:
    """An array of `shape` and luminal dtype `dtype` held in `buffer` (a shared-storage MTLBuffer) from byte 0."""

    def __init__(self, buffer: Any, shape: tuple[int, ...], dtype: dt.DType):
        self.buffer, self.shape, self.dtype = buffer, tuple(int(n) for n in shape), dtype
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * dtype.itemsize
        if buffer.length() < self.nbytes:
            raise ValueError(f"a MetalArray of shape {self.shape} and {dtype.name} needs {self.nbytes} bytes; "
                             f"its buffer has {buffer.length()}")  # fmt: skip

    def numpy(self) -> np.ndarray:
        """The array as a numpy view of the buffer's bytes (no copy: writes go to the buffer)."""
        flat = host_bytes(self.buffer)[: self.nbytes].view(storage(self.dtype))
        return flat.view(self.dtype.np).reshape(self.shape)


def to_metal(device: Any, api: Any, value: Any) -> MetalArray:
    """`value` (numpy, bfloat16 as ml_dtypes') copied once into a new shared-storage buffer of `device` (`api` is
    PyObjC's Metal module)."""
    array = np.ascontiguousarray(np.asarray(value))
    kind = dt.dtype_of(array.dtype)
    return MetalArray(shared_buffer(device, api, array.view(storage(kind)).tobytes()), array.shape, kind)


def shared_buffer(device: Any, api: Any, data: bytes) -> Any:
    """A new shared-storage MTLBuffer holding `data` (one byte at least: Metal makes no empty buffer)."""
    data = data or b"\0"
    return device.newBufferWithBytes_length_options_(data, len(data), api.MTLResourceStorageModeShared)
