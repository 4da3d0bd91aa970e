"""A stand-in for the few calls the Metal runtime makes through PyObjC's `Metal` module, backed by host memory
and the Metal shim, so that the runtime's own logic (pipelines, resident weights, arenas, one command buffer per
forward pass, the dims through setBytes, the status flag) runs on a machine without Metal. Buffers are numpy
bytes; compiling a library checks the MSL against the stand-in header and builds it with the shim; a dispatch
runs its kernel through the shim's `lm_kernel_<name>` (runtime/metal/shim.py) when its command buffer is
committed, as a GPU runs it after the commit, with the bindings it was encoded with.

The method names are PyObjC's selectors (`newLibraryWithSource:options:error:` is
`newLibraryWithSource_options_error_`, returning (object, error) for the NSError** argument).
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np

from luminal.compiler.kernels import ir
from luminal.compiler.program import CompiledProgram
from luminal.compiler.storage.run_plan import RunPlan
from luminal.runtime.cuda import shim as cuda_shim
from luminal.runtime.metal import shim

MTLResourceStorageModeShared = 0
MTLLanguageVersion3_1 = (3 << 16) + 1
MTLCommandBufferStatusCompleted = 4

current: Device | None = None  # what MTLCreateSystemDefaultDevice returns


def MTLSizeMake(width: int, height: int, depth: int):  # noqa: N802 - Metal's name
    return SimpleNamespace(width=width, height=height, depth=depth)


def MTLCreateSystemDefaultDevice():  # noqa: N802 - Metal's name
    return current


def use(program: CompiledProgram, max_threads: int = 1024, fail_compile: str | None = None) -> Device:
    """Make the default device one that runs `program`'s kernels (the shim builds them from its run plan)."""
    global current
    current = Device(program.kernels, program.plan, max_threads, fail_compile)
    return current


class Error:
    def __init__(self, text: str):
        self.text = text

    def localizedDescription(self) -> str:  # noqa: N802
        return self.text


class MTLCompileOptions:
    def __init__(self):
        self.fast_math, self.language = True, None  # Metal's defaults: fast math on

    @classmethod
    def new(cls) -> MTLCompileOptions:
        return cls()

    def setFastMathEnabled_(self, value: bool) -> None:  # noqa: N802
        self.fast_math = value

    def setLanguageVersion_(self, value: int) -> None:  # noqa: N802
        self.language = value


class Contents:
    def __init__(self, data: np.ndarray):
        self.data = data

    def as_buffer(self, count: int) -> memoryview:
        return memoryview(self.data[:count])


class Buffer:
    def __init__(self, nbytes: int, data: bytes | None = None):
        self.data = np.zeros(nbytes, np.uint8)
        if data is not None:
            self.data[:] = np.frombuffer(data, np.uint8)

    def contents(self) -> Contents:
        return Contents(self.data)

    def length(self) -> int:
        return self.data.size


class Device:
    def __init__(self, program: ir.KernelProgram, plan: RunPlan, max_threads: int, fail_compile: str | None):
        self.program, self.plan, self.max_threads, self.fail_compile = program, plan, max_threads, fail_compile
        self.buffers: list[Buffer] = []  # every buffer made, in order
        self.command_buffers: list[CommandBuffer] = []
        self.libraries: list[Library] = []

    def newCommandQueue(self) -> Queue:  # noqa: N802
        return Queue(self)

    def newLibraryWithSource_options_error_(self, source: str, options: MTLCompileOptions, error):  # noqa: N802
        if self.fail_compile:
            return None, Error(self.fail_compile)
        shim.check_source(source)
        library = ctypes.CDLL(str(shim.build_library(source, shim.entries(self.program, self.plan))))
        self.libraries.append(Library(source, options, library))
        return self.libraries[-1], None

    def newComputePipelineStateWithFunction_error_(self, function: Function, error):  # noqa: N802
        return Pipeline(function, self.max_threads), None

    def newBufferWithLength_options_(self, length: int, options: int) -> Buffer:  # noqa: N802
        self.buffers.append(Buffer(length))
        return self.buffers[-1]

    def newBufferWithBytes_length_options_(self, data: bytes, length: int, options: int) -> Buffer:  # noqa: N802
        assert len(data) == length
        self.buffers.append(Buffer(length, data))
        return self.buffers[-1]


class Library:
    def __init__(self, source: str, options: MTLCompileOptions, shared: ctypes.CDLL):
        self.source, self.options, self.shared = source, options, shared

    def newFunctionWithName_(self, name: str) -> Function | None:  # noqa: N802
        return Function(self, name) if f"kernel void {name}(" in self.source else None


class Function:
    def __init__(self, library: Library, name: str):
        self.library, self.name = library, name


class Pipeline:
    def __init__(self, function: Function, max_threads: int):
        self.function, self.max_threads = function, max_threads

    def maxTotalThreadsPerThreadgroup(self) -> int:  # noqa: N802
        return self.max_threads


class Queue:
    def __init__(self, device: Device):
        self.device = device

    def commandBuffer(self) -> CommandBuffer:  # noqa: N802
        self.device.command_buffers.append(CommandBuffer())
        return self.device.command_buffers[-1]


class Dispatch:
    """One encoded dispatch: the pipeline, the bindings by index (a buffer and offset, or copied bytes)."""

    def __init__(self, pipeline: Pipeline, bindings: dict, groups, threads):
        self.pipeline, self.bindings, self.groups, self.threads = pipeline, bindings, groups, threads

    def run(self) -> None:
        pointers = []
        for index in range(len(self.bindings)):
            bound = self.bindings[index]  # every index from 0 must be bound, as the kernel reads them all
            if isinstance(bound, np.ndarray):
                pointers.append(bound.ctypes.data)
            else:
                buffer, offset = bound
                pointers.append(buffer.data.ctypes.data + offset)
        table = (ctypes.c_void_p * len(pointers))(*pointers)
        entry = getattr(self.pipeline.function.library.shared, f"lm_kernel_{self.pipeline.function.name}")
        entry.argtypes, entry.restype = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64], ctypes.c_int
        cuda_shim.unless_hung(entry(table, self.groups.width))


class CommandBuffer:
    def __init__(self):
        self.encoders: list[Encoder] = []
        self.committed = self.completed = False

    def computeCommandEncoder(self) -> Encoder:  # noqa: N802
        self.encoders.append(Encoder())
        return self.encoders[-1]

    def commit(self) -> None:
        assert not self.committed and all(e.ended for e in self.encoders), "commit once, after endEncoding"
        self.committed = True
        for encoder in self.encoders:
            for dispatch in encoder.dispatches:
                dispatch.run()
        self.completed = True

    def waitUntilCompleted(self) -> None:  # noqa: N802
        assert self.committed, "waiting for a command buffer never committed"

    def status(self) -> int:
        return MTLCommandBufferStatusCompleted if self.completed else 0

    def error(self):
        return None


class Encoder:
    def __init__(self):
        self.pipeline: Pipeline | None = None
        self.bindings: dict[int, object] = {}
        self.dispatches: list[Dispatch] = []
        self.ended = False

    def setComputePipelineState_(self, pipeline: Pipeline) -> None:  # noqa: N802
        self.pipeline = pipeline

    def setBuffer_offset_atIndex_(self, buffer: Buffer, offset: int, index: int) -> None:  # noqa: N802
        assert offset % 4 == 0, "Metal needs buffer offsets aligned to 4 bytes"
        self.bindings[index] = (buffer, offset)

    def setBytes_length_atIndex_(self, data: bytes, length: int, index: int) -> None:  # noqa: N802
        assert length <= 4096, "setBytes is for less than 4 KB"
        self.bindings[index] = np.frombuffer(bytes(data[:length]), np.uint8).copy()  # copied when encoded

    def dispatchThreadgroups_threadsPerThreadgroup_(self, groups, threads) -> None:  # noqa: N802
        assert not self.ended and self.pipeline is not None
        assert threads.width <= self.pipeline.max_threads
        self.dispatches.append(Dispatch(self.pipeline, dict(self.bindings), groups, threads))

    def endEncoding(self) -> None:  # noqa: N802
        self.ended = True
