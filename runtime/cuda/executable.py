"""A program loaded on a CUDA device through CuPy: one CUBIN, resident weights, one arena per shape bucket, and a
whole forward pass issued as one CUDA graph launch.

Load: the source compiled once by NVRTC for this device's architecture (cached on disk, runtime/cuda/nvrtc.py),
the CUBIN loaded as one module, each launch's function looked up by name, the weights uploaded once, then the
load plan run once: the buffers computed from weights alone (compiler/kernels/derived_weights.py), after which a weight
that only they read is freed. All of it on the executable's own non-blocking stream, synchronised at the end.
Run: on that stream, after the caller's current stream (where device inputs were made); the symbols bound from
the inputs' shapes; the dims rounded up to their bucket (runtime/cuda/buckets.py); on the bucket's first run its
arena is allocated, the plan launched kernel by kernel and then, with graph=True, captured at the bucket's grids;
every later run copies the live dims into D and the inputs into their slots and launches the graph. A kernel
returns from the blocks the live dims do not need, so one capture serves every dims of its bucket. With
graph=False the kernels are launched one by one at the live dims' grids (as the anchor the graph launch is
measured against); in debug mode (LUMINAL_CUDA_SYNC=1) each is also waited for, so a fault names its kernel.
The status flag is read after the run: a gather or scatter index out of range raises IndexError, as on the CPU.
A donated input that the program writes in place (compiler/kernels/in_place.py: a KV pool's scatter) given as a device
array is not copied into its slot: the arena points at the caller's array (the graph is captured again when that
pointer changes), the scatter writes it, and the run hands that same array back as the output. A GEMM step the
plan gives to cuBLAS is issued on the same stream (runtime/cuda/cublas.py), so the graph captures it with the
kernels.

CuPy is passed in (`cp`), never imported here at module import.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Mapping

import numpy as np

from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import COUNTERS, DERIVED, PACKED, RunPlan
from luminal.graph import Graph
from luminal.runtime.cuda import arrays, buckets, nvrtc
from luminal.runtime.cuda.arena import DeviceArena
from luminal.runtime.cuda.cublas import CublasSteps
from luminal.runtime.cuda.layout import launches_at
from luminal.runtime.reference import bind_symbols

ALIGNMENT = 16  # bytes: the widest vector load a kernel issues (float4, int4)


def storage(d: dt.DType, bfloat16: bool = False) -> np.dtype:
    """The dtype a buffer's elements are moved as: bfloat16 as itself where CuPy has it (`bfloat16`), else as its
    16 bits."""
    if d == dt.bfloat16 and not bfloat16:
        return np.dtype(np.uint16)
    return np.dtype(d.np)


def has_bfloat16(cp: Any) -> bool:
    """Whether this CuPy makes bfloat16 arrays (CuPy 14 does, through ml_dtypes, on numpy 2.1.2 or later)."""
    try:
        cp.empty(1, dt.bfloat16.np)
    except (TypeError, ValueError, NotImplementedError):  # CuPy 13: "Unsupported dtype"
        return False
    return True


def architecture(cp: Any) -> str:
    """The current device's SM architecture, e.g. "90" for an H100 (a CUBIN is compiled for exactly this)."""
    return str(cp.cuda.Device().compute_capability)


class CudaExecutable:
    def __init__(self, cp: Any, graph: Graph, program: ir.KernelProgram, source: str,
                 weights: Mapping[str, Any], *, plan: RunPlan, graphs: bool = True, tf32: bool = False,
                 debug: bool | None = None):  # fmt: skip
        """`plan`: the program's run plan (compiler/storage/run_plan.py): the launches of a run and of the load.
        `tf32=True` lets cuBLAS steps on float32 operands round them to TF32 on tensor cores. `debug=True` (the
        default where LUMINAL_CUDA_SYNC=1) launches kernel by kernel, waits for each and names the one that faulted:
        a fault inside a CUDA graph shows only at the next synchronisation, with no kernel named."""
        self.debug = os.environ.get("LUMINAL_CUDA_SYNC") == "1" if debug is None else debug
        packed = [name for name, b in program.buffers.items() if b.role == PACKED]
        if packed:  # the CPU GEMM's weight panels: a CUDA program reads its weights as they are
            raise ValueError(f"a CUDA program has no packed weight buffers, this one has {packed[:4]}")
        self.cp, self.graph, self.program, self.graphs = cp, graph, program, graphs
        self.device = cp.cuda.Device()  # the current device at load: every run goes there
        self.bfloat16 = has_bfloat16(cp)  # bfloat16 buffers moved as bfloat16 arrays, else as their uint16 bits
        self.lock = threading.Lock()  # one run at a time: the arenas, D and the status flag are shared
        self.symbols = sorted(program.symbols)
        self.plan = list(plan.launches)
        self.load = list(plan.at_load)  # run once below: the buffers derived from the weights alone
        self.together = plan.together  # what the arenas keep live over each merged launch
        self.arch = architecture(cp)
        self.module = cp.cuda.function.Module()
        self.module.load(nvrtc.compile_cubin(source, self.arch))
        kernels = [launch for launch in [*self.load, *self.plan] if launch.call is None]
        self.functions = {launch.kernel: self.module.get_function(launch.kernel) for launch in kernels}
        self.stream = cp.cuda.Stream(non_blocking=True)  # graph capture needs a stream other than the legacy one
        needs_cublas = len(kernels) < len(self.load) + len(self.plan)
        self.cublas = CublasSteps(cp, self.stream, tf32=tf32) if needs_cublas else None
        # Everything the load writes goes on the executable's stream, which waits for no other (non-blocking): the
        # uploads (asynchronous: CuPy stages host data), the zeroed blocks and the load plan's kernels, in order;
        # then the stream is synchronised, so the first run, and a caller reading the weights, find them written.
        self._wait_for(cp.cuda.get_current_stream())  # where the caller may still be writing device weights
        with self.device, self.stream:
            self.weights = {b: self._upload(weights[label], program.buffers[b]) for label, b in program.weights.items()}
            self.weight_uploads = len(self.weights)  # what the load copied to the device; runs copy no weight again
            # Arrival counters (compiler/cuda/arrivals.py): zero at load, reset by the kernels that count on them.
            for name, b in program.buffers.items():
                if b.role == COUNTERS:
                    self.weights[name] = cp.zeros(int(b.size.evaluate({})), cp.int32)
            self.dims = cp.zeros(max(len(self.symbols), 1), cp.int64)  # the dims block D every kernel reads
            self.status = cp.zeros(1, cp.int32)  # lm_status: set to 1 by a kernel that met an index out of range
            self._derive()
        self.stream.synchronize()
        self.arenas: dict[tuple[int, ...], DeviceArena] = {}
        # donated inputs the program writes in place: input buffer -> input name
        self.in_place = dict(plan.written_inputs)

    def _upload(self, value: Any, buf: ir.Buffer):
        """A weight as a resident flat device array of its storage dtype (a device array is used in place)."""
        cp = self.cp
        if arrays.on_device(value):
            array = cp.ascontiguousarray(cp.from_dlpack(value)).ravel()
            if array.data.ptr % ALIGNMENT:  # an offset view: the kernels' vector loads assume an aligned base
                array = array.copy()
        else:
            flat = np.ascontiguousarray(arrays.host_array(value)).reshape(-1)
            array = cp.asarray(flat.view(self._storage(buf.dtype)))
        if array.size != int(buf.size.evaluate({})) or array.dtype.itemsize != buf.dtype.itemsize:
            raise ValueError(f"weight {buf.label!r}: {array.size} elements of {array.dtype}, expected "
                             f"{buf.size} of {buf.dtype.name}")  # fmt: skip
        return array

    def _storage(self, d: dt.DType) -> np.dtype:
        return storage(d, self.bfloat16)

    def _wait_for(self, other: Any) -> None:
        """The executable's stream waits for the work issued so far on stream `other` (the caller's)."""
        ready = self.cp.cuda.Event()
        ready.record(other)
        self.stream.wait_event(ready)

    def _derive(self) -> None:
        """The load plan, once: every derived buffer computed from the weights (compiler/kernels/derived_weights.py);
        then a weight only those launches read is let go, since no run reads it."""
        if not self.load:
            return
        cp, stream = self.cp, self.stream
        for name, b in self.program.buffers.items():
            if b.role == DERIVED:
                self.weights[name] = cp.zeros(int(b.size.evaluate({})), self._storage(b.dtype))
        pointers = {buf: array.data for buf, array in self.weights.items()}
        with self.device, stream:
            cp.cuda.runtime.memsetAsync(self.status.data.ptr, 0, self.status.nbytes, stream.ptr)
            for launch, blocks in launches_at(self.load, {}):
                if launch.call is not None:
                    self.cublas.issue(launch.call, pointers, {})
                else:
                    arguments = (*(pointers[b] for b in launch.buffers), self.dims, self.status)
                    self.functions[launch.kernel]((blocks,), (launch.block,), arguments, stream=stream)
            failed = int(self.status.get(stream=stream)[0])
        if failed:
            raise IndexError("a gather index was out of range while deriving buffers from the weights at load")
        read = {buf for launch in self.plan for buf in launch.buffers}
        for buf in set(self.program.weights.values()) - read:
            del self.weights[buf]

    def arena(self, env: Mapping[str, int]) -> DeviceArena:
        """The arena of the bucket that dims `env` fall in, allocated on first use."""
        sized = buckets.bucket(env, self.program.symbols)
        key = buckets.key(sized, self.symbols)
        if key not in self.arenas:
            tail = (self.dims, self.status)
            self.arenas[key] = DeviceArena(self.cp, self.program, sized, self.weights, tail, self.together)
        return self.arenas[key]

    def run(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None, *,
            device_outputs: bool = False, graph: bool | None = None) -> dict[str, Any]:  # fmt: skip
        """Outputs by name: numpy arrays, or CuPy arrays (DLPack: `torch.from_dlpack` takes them) when
        device_outputs=True (bfloat16 ones as their uint16 bits where CuPy has no bfloat16: `.view(torch.bfloat16)`).
        Inputs may be numpy arrays or any DLPack arrays, device ones read in place. `graph` overrides the
        load's choice between one CUDA graph launch and kernel-by-kernel launches for this run."""
        cp, stream = self.cp, self.stream
        use_graph = (self.graphs if graph is None else graph) and not self.debug
        caller = cp.cuda.get_current_stream()  # where the caller made its device inputs
        with self.lock, self.device, stream:
            host, device, shapes = arrays.split(inputs, cp.from_dlpack)
            if device:
                self._wait_for(caller)
            env = bind_symbols(self.graph, self._bits_as_bfloat16(shapes, device), dims)
            arena = self.arena(env)
            self.dims.set(np.array([env[s] for s in self.symbols] or [0], np.int64), stream=stream)
            self._copy_inputs(arena, env, host, device)
            if use_graph and arena.graph is not None:
                arena.graph.launch(stream)
            else:
                # A bucket's first run is launched eagerly, then captured (a capture does not run): what sets itself
                # up lazily (cuBLAS) does so outside a capture, and a fault shows here, not in a graph.
                self._issue(arena, env)
                if use_graph:
                    arena.graph = self._capture(arena)
            outputs = self._outputs(arena, env, device_outputs, inputs, device)
            failed = int(self.status.get(stream=stream)[0])  # waits for the run (and the outputs' copies)
        if failed:
            raise IndexError("a gather or scatter index was out of range")
        return outputs

    def time_graph(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None, repeats: int) -> list[float]:
        """Seconds of each of `repeats` launches of the forward pass's CUDA graph at these inputs, measured on
        the device with CUDA events (inputs copied in and the graph captured first, outside the timing)."""
        cp, stream = self.cp, self.stream
        self.run(inputs, dims, graph=True)  # the arena allocated, the inputs in place, the graph captured
        with self.lock, self.device, stream:
            env = bind_symbols(self.graph, arrays.split(inputs, cp.from_dlpack)[2], dims)
            graph = self.arena(env).graph
            seconds = []
            for _ in range(repeats):
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record(stream)
                graph.launch(stream)
                end.record(stream)
                end.synchronize()
                seconds.append(cp.cuda.get_elapsed_time(start, end) / 1e3)  # CuPy reports milliseconds
        return seconds

    def _capture(self, arena: DeviceArena):
        """The whole plan at the bucket's grids, captured as one CUDA graph (D holds the live dims at each run)."""
        self.stream.begin_capture()
        try:
            self._issue(arena, arena.env)
        except BaseException as failure:
            try:
                self.stream.end_capture()  # leave the stream usable; the half-captured graph is dropped
            except Exception as also:  # an invalidated capture raises here too: the first failure is the one
                failure.add_note(f"ending the failed capture then raised {type(also).__name__}: {also}")
            raise
        return self.stream.end_capture()

    def _issue(self, arena: DeviceArena, env: Mapping[str, int]) -> None:
        """The status flag cleared, then every launch of the plan at the grids of dims `env`, on the stream; in
        debug mode each is waited for, and a fault or an index out of range is reported with its kernel's name."""
        self.cp.cuda.runtime.memsetAsync(self.status.data.ptr, 0, self.status.nbytes, self.stream.ptr)
        for launch, blocks in launches_at(self.plan, env):
            if launch.call is not None:
                self.cublas.issue(launch.call, arena.pointers, env)
            else:
                self.functions[launch.kernel]((blocks,), (launch.block,), arena.arguments(launch), stream=self.stream)
            if self.debug:
                self._check(launch.kernel or f"cuBLAS step {launch.call}")

    def _check(self, what: str) -> None:
        """Wait for `what`, the last launch; name it if it faulted or met an index out of range."""
        try:
            self.stream.synchronize()
        except Exception as fault:  # a CUDA error (an illegal address): sticky, every later call fails too
            raise RuntimeError(f"{what} faulted on the device: {type(fault).__name__}: {fault}") from fault
        if int(self.status.get(stream=self.stream)[0]):
            raise IndexError(f"a gather or scatter index was out of range in {what}")

    def _copy_inputs(self, arena: DeviceArena, env, host: dict[str, np.ndarray], device: dict[str, Any]) -> None:
        for label, buf in self.program.inputs.items():
            kind = self._storage(self.program.buffers[buf].dtype)
            source = host.get(label)
            if buf in self.in_place:  # written where the caller holds it, when the caller holds it on the device
                arena.bind(buf, None if source is not None else self._donated(device[label], buf, kind))
            if source is not None:
                flat = np.ascontiguousarray(source).reshape(-1).view(kind)
                arena.view(buf, flat.size, kind).set(flat, stream=self.stream)
            else:
                flat = device[label].reshape(-1).view(kind)
                if buf not in self.in_place:
                    arena.view(buf, flat.size, kind)[...] = flat  # a copy kernel on the current stream (ours)

    def _bits_as_bfloat16(self, shapes: dict[str, np.ndarray], device: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The shape stand-ins, with a device input the program takes as bfloat16 given as its uint16 bits (how a
        CuPy without bfloat16 holds a KV pool) standing in as bfloat16."""
        out = dict(shapes)
        for label, array in device.items():
            buf = self.program.inputs.get(label)
            if buf and self.program.buffers[buf].dtype == dt.bfloat16 and array.dtype == np.uint16:
                out[label] = arrays.stand_in(tuple(array.shape), dt.bfloat16.np)
        return out

    def _donated(self, array: Any, buf: str, kind: np.dtype):
        """The caller's device array as the flat view the kernels write; refused when no such view exists."""
        flat = array.reshape(-1).view(kind)
        if flat.data.ptr != array.data.ptr:
            raise ValueError(f"donated input {self.in_place[buf]!r} must be a contiguous device array")
        if flat.data.ptr % ALIGNMENT:  # written in place, so never a copy: the kernels' vector loads need the base
            raise ValueError(f"donated input {self.in_place[buf]!r} must start at a {ALIGNMENT}-byte aligned address")
        return flat

    def _outputs(self, arena: DeviceArena, env: Mapping[str, int], on_device: bool, given: Mapping[str, Any],
                 device: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
        """Outputs read from the arena (where a bound caller's array is part of it); a donated device input written
        in place is handed back as the caller's own array."""
        out = {}
        for label, (buf, shape) in self.program.outputs.items():
            source = self.in_place.get(buf)
            if on_device and source in device:
                out[label] = given[source]
                continue
            concrete = tuple(int(d.evaluate(dict(env))) for d in shape)
            d = self.program.buffers[buf].dtype
            view = arena.view(buf, int(np.prod(concrete, dtype=np.int64)), self._storage(d))
            if on_device:  # a copy: the arena is overwritten by the next run
                out[label] = view.copy().reshape(concrete)
            else:
                out[label] = view.get(stream=self.stream).view(d.np).reshape(concrete)
        return out
