"""A stand-in for the few CuPy calls the CUDA runtime makes, backed by host memory and the host shim, so that the
runtime's own logic (arenas, input slots, the dims block, graph capture and replay, outputs, the status flag) runs
on a machine without a GPU. Device memory is host memory; a kernel launch runs the kernel through the shim
(`lm_kernel_<name>`, runtime/cuda/shim.py); stream capture records launches and memsets, a graph replays them.
As on a device, a synchronous host transfer while a stream captures is an error.

Only the signatures read in CuPy's source are mirrored: Module.load(bytes), Module.get_function(name),
Function(grid, block, args, shared_mem=0, stream=None), Stream(non_blocking=...).begin_capture() / end_capture(),
Graph.launch(stream=None), runtime.memsetAsync(ptr, value, size, stream), alloc(n) -> MemoryPointer (+ offset),
ndarray(shape, dtype, memptr=...), .set(arr, stream=None), .get(stream=None), .data.ptr, Event().record(stream)
/ .synchronize() and get_elapsed_time(start, end) in milliseconds (here the host clock's: work runs when issued).
The runtime calls cuBLAS's C API, not CuPy's cuBLAS module: the `fake_cublas_library` fixture (conftest.py) puts
fake_cublas.py (numpy GEMMs on this memory, on the handle's stream) where the runtime looks for libcublas.
"""

from __future__ import annotations

import ctypes
import time
from types import SimpleNamespace

import numpy as np

from luminal.runtime.cuda import shim
from luminal.runtime.cuda.nvrtc import ELF_MAGIC

int32, int64 = np.int32, np.int64
_capturing: list[Stream] = []


class MemoryPointer:
    def __init__(self, owner: np.ndarray, ptr: int):
        self.owner, self.ptr = owner, ptr  # owner keeps the host memory alive

    def __add__(self, offset: int) -> MemoryPointer:
        return MemoryPointer(self.owner, self.ptr + int(offset))


def alloc(nbytes: int) -> MemoryPointer:
    raw = np.zeros(nbytes + 256, np.uint8)
    return MemoryPointer(raw, raw.ctypes.data + (-raw.ctypes.data % 256))  # CuPy's pool aligns to 256 bytes


def _sync_transfer(what: str) -> None:
    if _capturing:
        raise RuntimeError(f"{what} during stream capture: a synchronous transfer, illegal in a CUDA graph")


class ndarray:  # noqa: N801 - CuPy's name
    def __init__(self, shape, dtype, memptr: MemoryPointer | None = None):
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.data = memptr if memptr is not None else alloc(nbytes)
        buffer = (ctypes.c_uint8 * max(nbytes, 1)).from_address(self.data.ptr)
        self.a = np.ctypeslib.as_array(buffer)[:nbytes].view(dtype).reshape(shape)

    @classmethod
    def _of(cls, values: np.ndarray) -> ndarray:
        out = cls(values.shape, values.dtype)
        out.a[...] = values
        return out

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    size = property(lambda self: self.a.size)
    nbytes = property(lambda self: self.a.nbytes)

    def set(self, arr: np.ndarray, stream=None) -> None:
        _sync_transfer("ndarray.set")
        assert arr.shape == self.shape and arr.dtype == self.dtype, (arr.shape, arr.dtype, self.shape, self.dtype)
        self.a[...] = arr

    def get(self, stream=None) -> np.ndarray:
        _sync_transfer("ndarray.get")
        return self.a.copy()

    def copy(self) -> ndarray:
        return ndarray._of(self.a)

    def reshape(self, *shape) -> ndarray:
        return self._view(self.a.reshape(*shape))

    def ravel(self) -> ndarray:
        return self.reshape(-1)

    def view(self, dtype) -> ndarray:
        return self._view(self.a.view(dtype))

    def _view(self, a: np.ndarray) -> ndarray:
        if not a.flags.c_contiguous or not np.shares_memory(a, self.a):
            return ndarray._of(a)
        out = ndarray.__new__(ndarray)
        out.data, out.a = MemoryPointer(self.data.owner, a.ctypes.data), a
        return out

    def __setitem__(self, key, value) -> None:
        self.a[key] = value.a if isinstance(value, ndarray) else value

    def __mul__(self, k) -> ndarray:
        return ndarray._of(self.a * k)

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA: what a CuPy array says


def zeros(n, dtype) -> ndarray:
    return ndarray._of(np.zeros(n, dtype))


def asarray(x) -> ndarray:
    return x if isinstance(x, ndarray) else ndarray._of(np.asarray(x))


def ascontiguousarray(x: ndarray) -> ndarray:
    return x


def from_dlpack(x) -> ndarray:
    assert isinstance(x, ndarray), "the fake device holds only fake CuPy arrays"
    return x


def asnumpy(x: ndarray) -> np.ndarray:
    return x.get()


class Stream:
    def __init__(self, non_blocking: bool = False):
        self.ptr, self.recording = id(self), None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self) -> None:
        self.recording = []
        _capturing.append(self)

    def end_capture(self) -> Graph:
        calls, self.recording = self.recording, None
        _capturing.remove(self)
        return Graph(calls)

    def enqueue(self, call) -> None:
        """Run `call` now, or record it while this stream captures."""
        if self.recording is not None:
            self.recording.append(call)
        else:
            call()


class Graph:
    def __init__(self, calls):
        self.calls, self.launches = calls, 0

    def launch(self, stream=None) -> None:
        self.launches += 1
        for call in self.calls:
            call()


class Device:
    compute_capability, id = "90", 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Module:
    library: ctypes.CDLL | None = None  # the shim library of the program under test (set by the test)

    def load(self, cubin: bytes) -> None:
        assert cubin[:4] == ELF_MAGIC, "Module.load takes a CUBIN"
        self.lib = Module.library

    def get_function(self, name: str):
        return Function(getattr(self.lib, f"lm_kernel_{name}"))


class Function:
    launched = 0  # every kernel launch run (not recorded), over all functions

    def __init__(self, entry):
        self.entry = entry

    def __call__(self, grid: tuple, block: tuple, args, shared_mem: int = 0, stream=None) -> None:
        pointers = (ctypes.c_void_p * len(args))(*[a.ptr if isinstance(a, MemoryPointer) else a.data.ptr for a in args])
        blocks = ctypes.c_int64(max(1, grid[0]))  # CuPy launches at least one block

        def call():
            Function.launched += 1
            shim.unless_hung(self.entry(pointers, blocks))

        (stream or Stream()).enqueue(call)


class Event:
    def __init__(self):
        self.at: float | None = None

    def record(self, stream=None) -> None:
        (stream or Stream()).enqueue(lambda: setattr(self, "at", time.perf_counter()))

    def synchronize(self) -> None:
        assert self.at is not None, "synchronize on an event never recorded"


def _elapsed_ms(start: Event, end: Event) -> float:
    return (end.at - start.at) * 1e3


def capturing(stream: int) -> bool:
    """Whether the stream whose pointer is `stream` is capturing."""
    return any(s.ptr == stream for s in _capturing)


def enqueue_on(stream: int, call) -> None:
    """Run `call` now, or record it while the stream whose pointer is `stream` captures."""
    target = next((s for s in _capturing if s.ptr == stream), None)
    target.recording.append(call) if target else call()


def _memset_async(ptr: int, value: int, size: int, stream: int) -> None:
    enqueue_on(stream, lambda: ctypes.memset(ptr, value, size))


cuda = SimpleNamespace(
    Device=Device, Stream=Stream, alloc=alloc, runtime=SimpleNamespace(memsetAsync=_memset_async),
    Event=Event, get_elapsed_time=_elapsed_ms,
    function=SimpleNamespace(Module=Module),
)  # fmt: skip
