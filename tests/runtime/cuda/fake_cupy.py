"""A stand-in for the few CuPy calls the CUDA runtime makes, backed by host memory and the host shim, so that the
runtime's own logic (arenas, input slots, the dims block, graph capture and replay, outputs, the status flag) runs
on a machine without a GPU. Device memory is host memory; a kernel launch runs the kernel through the shim
(`lm_kernel_<name>`, runtime/cuda/shim.py); stream capture records launches and memsets, a graph replays them.

It keeps what makes device code racy, so that a missing synchronisation fails a test here:
- Work is queued on a stream (the current one, `with stream:`, unless a call names one) and runs only when
  something waits for it: `Stream.synchronize`, `Event.synchronize`, a `get` (which synchronises its stream), or
  work on another stream that CUDA orders after it (`Stream.wait_event`; the legacy default stream, `Stream.null`,
  waits for every blocking stream and they for it; a `non_blocking=True` stream waits for neither).
- Host data handed to a copy is read when the copy is issued (CuPy stages it), device data when the copy runs.
- Memory from `alloc` (and so `ndarray`) is poisoned with 0xFF bytes (NaN as floats, -1 as integers), not zeroed.
- A synchronous host transfer while a stream captures is an error, as on a device.
- bfloat16 arrays exist only where `BFLOAT16` says this CuPy has them (14 does, 13 does not).

Only the signatures read in CuPy's source are mirrored: Module.load(bytes), Module.get_function(name),
Function(grid, block, args, shared_mem=0, stream=None), Stream(non_blocking=...).begin_capture() / end_capture()
/ synchronize() / wait_event(event), Stream.null, get_current_stream(), Graph.launch(stream=None),
runtime.memsetAsync(ptr, value, size, stream), alloc(n) -> MemoryPointer (+ offset), empty, zeros, ndarray(shape, dtype,
memptr=...), .set(arr, stream=None), .get(stream=None), .astype(dtype), <<, .data.ptr,
Event().record(stream=None) / .synchronize()
and get_elapsed_time(start, end) in milliseconds (the host clock's, when the recorded work ran).
The runtime calls cuBLAS's C API, not CuPy's cuBLAS module: the `fake_cublas_library` fixture (conftest.py) puts
fake_cublas.py (numpy GEMMs on this memory, on the handle's stream) where the runtime looks for libcublas.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import deque
from types import SimpleNamespace

import ml_dtypes
import numpy as np

from luminal.runtime.cuda import shim
from luminal.runtime.cuda.nvrtc import ELF_MAGIC

int32, int64 = np.int32, np.int64
POISON = 0xFF
BFLOAT16 = False  # CuPy 13 has no bfloat16 arrays; CuPy 14 has them (through ml_dtypes): tests set it


class MemoryPointer:
    def __init__(self, owner: np.ndarray, ptr: int):
        self.owner, self.ptr = owner, ptr  # owner keeps the host memory alive

    def __add__(self, offset: int) -> MemoryPointer:
        return MemoryPointer(self.owner, self.ptr + int(offset))


def alloc(nbytes: int) -> MemoryPointer:
    raw = np.full(nbytes + 256, POISON, np.uint8)  # what a device allocation holds: whatever was there before
    return MemoryPointer(raw, raw.ctypes.data + (-raw.ctypes.data % 256))  # CuPy's pool aligns to 256 bytes


# ---- streams ---------------------------------------------------------------------------------------------------


class Stream:
    def __init__(self, non_blocking: bool = False, *, _null: bool = False):
        self.ptr = 0 if _null else id(self)
        self.non_blocking = non_blocking
        self.pending: deque = deque()  # (call, [(stream, count) that must be done first]), oldest first
        self.issued = self.done = 0
        self.recording: list | None = None
        self._waits: list[tuple[Stream, int]] = []  # event waits the next work item takes on
        _streams[self.ptr] = self

    def __enter__(self):
        _current().append(self)
        return self

    def __exit__(self, *exc):
        _current().pop()
        return False

    def enqueue(self, call) -> None:
        """Queue `call` after this stream's earlier work (and what CUDA orders before it), or record it while this
        stream captures."""
        if self.recording is not None:
            self.recording.append(call)
            return
        after, self._waits = self._waits, []
        if self is Stream.null:  # the legacy stream waits for every blocking stream
            after += [(s, s.issued) for s in _streams.values() if s is not self and not s.non_blocking]
        elif not self.non_blocking:  # and a blocking stream for it
            after.append((Stream.null, Stream.null.issued))
        self.pending.append((call, after))
        self.issued += 1

    def wait_event(self, event: Event) -> None:
        """The next work on this stream waits for what `event` recorded."""
        if event.point is not None:
            self._waits.append(event.point)

    def synchronize(self) -> None:
        _finish(self, self.issued)

    def begin_capture(self) -> None:
        self.recording = []

    def end_capture(self) -> Graph:
        calls, self.recording = self.recording, None
        return Graph(calls)


_streams: dict[int, Stream] = {}
_here = threading.local()
Stream.null = Stream(_null=True)


def _current() -> list[Stream]:
    if not hasattr(_here, "streams"):
        _here.streams = []
    return _here.streams


def get_current_stream() -> Stream:
    stack = _current()
    return stack[-1] if stack else Stream.null


def _finish(stream: Stream, count: int) -> None:
    """Run `stream`'s work until `count` items are done, first what each of them waits for."""
    while stream.done < count:
        call, after = stream.pending.popleft()
        for other, needed in after:
            _finish(other, needed)
        call()
        stream.done += 1


def _sync_transfer(what: str) -> None:
    if any(s.recording is not None for s in _streams.values()):
        raise RuntimeError(f"{what} during stream capture: a synchronous transfer, illegal in a CUDA graph")


def capturing(stream: int) -> bool:
    """Whether the stream whose pointer is `stream` is capturing."""
    return _streams[stream].recording is not None


def enqueue_on(stream: int, call) -> None:
    """Queue `call` on the stream whose pointer is `stream` (recorded while it captures)."""
    _streams[stream].enqueue(call)


def _memset_async(ptr: int, value: int, size: int, stream: int) -> None:
    enqueue_on(stream, lambda: ctypes.memset(ptr, value, size))


# ---- arrays ----------------------------------------------------------------------------------------------------


class ndarray:  # noqa: N801 - CuPy's name
    def __init__(self, shape, dtype, memptr: MemoryPointer | None = None):
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
        dtype = np.dtype(dtype)
        if dtype == ml_dtypes.bfloat16 and not BFLOAT16:
            raise TypeError("Unsupported dtype bfloat16")  # what CuPy 13 says
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.data = memptr if memptr is not None else alloc(nbytes)
        buffer = (ctypes.c_uint8 * max(nbytes, 1)).from_address(self.data.ptr)
        self.a = np.ctypeslib.as_array(buffer)[:nbytes].view(dtype).reshape(shape)  # read it through get()

    @classmethod
    def _of(cls, values: np.ndarray, keep: ndarray | None = None) -> ndarray:
        """A new array holding `values` (device memory: read when the copy runs on the current stream); `keep`, the
        device array `values` views, is held until then (see __setitem__)."""
        out = cls(values.shape, values.dtype)

        def copy(source=keep) -> None:  # the default argument holds `keep` until the copy has run
            out.a[...] = values

        get_current_stream().enqueue(copy)
        return out

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    size = property(lambda self: self.a.size)
    nbytes = property(lambda self: self.a.nbytes)

    def set(self, arr: np.ndarray, stream=None) -> None:
        _sync_transfer("ndarray.set")
        assert arr.shape == self.shape and arr.dtype == self.dtype, (arr.shape, arr.dtype, self.shape, self.dtype)
        staged = arr.copy()
        (stream or get_current_stream()).enqueue(lambda: self.a.__setitem__(Ellipsis, staged))

    def get(self, stream=None) -> np.ndarray:
        _sync_transfer("ndarray.get")
        (stream or get_current_stream()).synchronize()
        return self.a.copy()

    def copy(self) -> ndarray:
        return ndarray._of(self.a, keep=self)

    def reshape(self, *shape) -> ndarray:
        return self._view(self.a.reshape(*shape))

    def ravel(self) -> ndarray:
        return self.reshape(-1)

    def view(self, dtype) -> ndarray:
        return self._view(self.a.view(dtype))

    def _view(self, a: np.ndarray) -> ndarray:
        if not a.flags.c_contiguous or not np.shares_memory(a, self.a):
            return ndarray._of(a, keep=self)
        out = ndarray.__new__(ndarray)
        out.data, out.a = MemoryPointer(self.data.owner, a.ctypes.data), a
        return out

    def __setitem__(self, key, value) -> None:
        # The queued copy holds the source array itself, not only a view of its memory: CuPy's pool hands a freed
        # array's memory to a later allocation only behind the work already queued on its stream, so a temporary
        # (`a[i] = cp.asarray(x)`) stays valid for its copy; a bare view would let numpy reuse it at once.
        def copy() -> None:
            self.a[key] = value.a if isinstance(value, ndarray) else value

        get_current_stream().enqueue(copy)

    def __mul__(self, k) -> ndarray:
        return self._elementwise(self.dtype, lambda a: a * k)

    def __lshift__(self, bits: int) -> ndarray:
        return self._elementwise(self.dtype, lambda a: a << bits)

    def astype(self, dtype) -> ndarray:
        return self._elementwise(dtype, lambda a: a.astype(dtype))

    def _elementwise(self, dtype, fn) -> ndarray:
        """A new array computed from this one by a kernel on the current stream."""
        out = ndarray(self.shape, dtype)
        get_current_stream().enqueue(lambda: out.a.__setitem__(Ellipsis, fn(self.a)))
        return out

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA: what a CuPy array says


def empty(n, dtype) -> ndarray:
    return ndarray(n, dtype)


def zeros(n, dtype) -> ndarray:
    out = ndarray(n, dtype)
    get_current_stream().enqueue(lambda: out.a.fill(0))  # a memsetAsync on the current stream
    return out


def asarray(x) -> ndarray:
    if isinstance(x, ndarray):
        return x
    staged = np.array(x)  # CuPy copies host data through a pinned staging buffer, then transfers asynchronously
    return ndarray._of(staged)


def ascontiguousarray(x: ndarray) -> ndarray:
    return x


def from_dlpack(x) -> ndarray:
    assert isinstance(x, ndarray), "the fake device holds only fake CuPy arrays"
    return x


def asnumpy(x: ndarray) -> np.ndarray:
    return x.get()


# ---- graphs, modules, kernels, events --------------------------------------------------------------------------


class Graph:
    def __init__(self, calls):
        self.calls, self.launches = calls, 0

    def launch(self, stream=None) -> None:
        self.launches += 1
        calls = list(self.calls)
        (stream or get_current_stream()).enqueue(lambda: [call() for call in calls])


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

        (stream or get_current_stream()).enqueue(call)


class Event:
    def __init__(self):
        self.at: float | None = None
        self.point: tuple[Stream, int] | None = None  # the stream and how much of its work the event follows

    def record(self, stream=None) -> None:
        stream = stream or get_current_stream()
        stream.enqueue(lambda: setattr(self, "at", time.perf_counter()))
        self.point = (stream, stream.issued)

    def synchronize(self) -> None:
        assert self.point is not None, "synchronize on an event never recorded"
        _finish(*self.point)


def _elapsed_ms(start: Event, end: Event) -> float:
    return (end.at - start.at) * 1e3


cuda = SimpleNamespace(
    Device=Device, Stream=Stream, alloc=alloc, runtime=SimpleNamespace(memsetAsync=_memset_async),
    Event=Event, get_elapsed_time=_elapsed_ms, get_current_stream=get_current_stream,
    function=SimpleNamespace(Module=Module),
)  # fmt: skip
