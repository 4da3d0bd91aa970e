"""A program loaded on a CUDA device through CuPy: one CUBIN, resident weights, one arena per shape bucket, and a
whole forward pass issued as one CUDA graph launch.

Load: the source compiled once by NVRTC for this device's architecture (cached on disk, runtime/cuda/nvrtc.py),
the CUBIN loaded as one module, each launch's function looked up by name, the weights uploaded once, then the
load plan run once: the buffers computed from weights alone (compiler/derived_weights.py), after which a weight
that only they read is freed.
Run: the symbols bound from the inputs' shapes; the dims rounded up to their bucket (runtime/cuda/buckets.py);
on the bucket's first run its arena is allocated and, with graph=True, the whole launch plan is captured on a
non-default stream at the bucket's grids; every run then copies the live dims into D and the inputs into their
slots and launches the graph. A kernel returns from the blocks the live dims do not need, so one capture serves
every dims of its bucket. With graph=False the kernels are launched one by one at the live dims' grids (for
debugging, and as the anchor the graph launch is measured against). The status flag is read after the run: a
gather or scatter index out of range raises IndexError, as on the CPU. A donated input that the program
writes in place (compiler/in_place.py: a KV pool's scatter) given as a device array is not copied into its slot:
the arena points at the caller's array (the graph is captured again when that pointer changes), the scatter
writes it, and the run hands that same array back as the output. A GEMM step the plan gives to cuBLAS is
issued on the same stream (runtime/cuda/cublas.py), so the graph captures it with the kernels.

CuPy is passed in (`cp`), never imported here at module import.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

import numpy as np

from luminal import dtypes as dt
from luminal.compiler import derived_weights, ir, prepack
from luminal.compiler.cuda import arrivals
from luminal.compiler.cuda.program import launched_together, load_plan, planned_launches
from luminal.compiler.in_place import written_inputs
from luminal.graph import Graph
from luminal.runtime.cuda import arrays, buckets, nvrtc
from luminal.runtime.cuda.arena import DeviceArena
from luminal.runtime.cuda.cublas import CublasSteps
from luminal.runtime.cuda.layout import launches_at
from luminal.runtime.reference import bind_symbols


def storage(d: dt.DType) -> np.dtype:
    """The dtype a buffer's elements are moved as: bfloat16 as its 16 bits (neither numpy nor CuPy has it)."""
    return np.dtype(np.uint16) if d == dt.bfloat16 else np.dtype(d.np)


def architecture(cp: Any) -> str:
    """The current device's SM architecture, e.g. "90" for an H100 (a CUBIN is compiled for exactly this)."""
    return str(cp.cuda.Device().compute_capability)


class CudaExecutable:
    def __init__(self, cp: Any, graph: Graph, program: ir.KernelProgram, source: str,
                 weights: Mapping[str, Any], *, graphs: bool = True, tf32: bool = False):  # fmt: skip
        """`tf32=True` lets cuBLAS steps on float32 operands round them to TF32 on tensor cores."""
        packed = [name for name, b in program.buffers.items() if b.role == prepack.ROLE]
        if packed:  # the CPU GEMM's weight panels: a CUDA program reads its weights as they are
            raise ValueError(f"a CUDA program has no packed weight buffers, this one has {packed[:4]}")
        self.cp, self.graph, self.program, self.graphs = cp, graph, program, graphs
        self.device = cp.cuda.Device()  # the current device at load: every run goes there
        self.lock = threading.Lock()  # one run at a time: the arenas, D and the status flag are shared
        self.symbols = sorted(program.symbols)
        planned = planned_launches(program)  # planned once: about 80 ms for a 1.1B model's prefill
        self.plan = [launch for _, launch in planned]
        self.load = load_plan(program)  # run once below: the buffers derived from the weights alone
        self.together = launched_together(program, planned)  # what the arenas keep live over each merged launch
        self.arch = architecture(cp)
        self.module = cp.cuda.function.Module()
        self.module.load(nvrtc.compile_cubin(source, self.arch))
        kernels = [launch for launch in [*self.load, *self.plan] if launch.call is None]
        self.functions = {launch.kernel: self.module.get_function(launch.kernel) for launch in kernels}
        self.stream = cp.cuda.Stream(non_blocking=True)  # graph capture needs a stream other than the legacy one
        needs_cublas = len(kernels) < len(self.load) + len(self.plan)
        self.cublas = CublasSteps(cp, self.stream, tf32=tf32) if needs_cublas else None
        self.weights = {b: self._upload(weights[label], program.buffers[b]) for label, b in program.weights.items()}
        self.weight_uploads = len(self.weights)  # what the load copied to the device; runs copy no weight again
        # Arrival counters (compiler/cuda/arrivals.py): zero at load, reset by the kernels that count on them.
        for name, b in program.buffers.items():
            if b.role == arrivals.ROLE:
                self.weights[name] = cp.zeros(int(b.size.evaluate({})), cp.int32)
        self.dims = cp.zeros(max(len(self.symbols), 1), cp.int64)  # the dims block D every kernel reads
        self.status = cp.zeros(1, cp.int32)  # lm_status: set to 1 by a kernel that met an index out of range
        self._derive()
        self.arenas: dict[tuple[int, ...], DeviceArena] = {}
        # donated inputs the program writes in place: input buffer -> input name
        self.in_place = written_inputs(program)

    def _upload(self, value: Any, buf: ir.Buffer):
        """A weight as a resident flat device array of its storage dtype (a device array is used in place)."""
        cp = self.cp
        if arrays.on_device(value):
            array = cp.ascontiguousarray(cp.from_dlpack(value)).ravel()
        else:
            array = cp.asarray(np.ascontiguousarray(arrays.host_array(value)).reshape(-1).view(storage(buf.dtype)))
        if array.size != int(buf.size.evaluate({})) or array.dtype.itemsize != buf.dtype.itemsize:
            raise ValueError(f"weight {buf.label!r}: {array.size} elements of {array.dtype}, expected "
                             f"{buf.size} of {buf.dtype.name}")  # fmt: skip
        return array

    def _derive(self) -> None:
        """The load plan, once: every derived buffer computed from the weights (compiler/derived_weights.py);
        then a weight only those launches read is let go, since no run reads it."""
        if not self.load:
            return
        cp, stream = self.cp, self.stream
        for name, b in self.program.buffers.items():
            if b.role == derived_weights.ROLE:
                self.weights[name] = cp.zeros(int(b.size.evaluate({})), storage(b.dtype))
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
        device_outputs=True, bfloat16 ones as their uint16 bits (CuPy has no bfloat16: `.view(torch.bfloat16)`).
        Inputs may be numpy arrays or any DLPack arrays, device ones read in place. `graph` overrides the
        load's choice between one CUDA graph launch and kernel-by-kernel launches for this run."""
        cp, stream = self.cp, self.stream
        use_graph = self.graphs if graph is None else graph
        with self.lock, self.device, stream:
            host, device, shapes = arrays.split(inputs, cp.from_dlpack)
            env = bind_symbols(self.graph, self._bits_as_bfloat16(shapes, device), dims)
            arena = self.arena(env)
            self.dims.set(np.array([env[s] for s in self.symbols] or [0], np.int64), stream=stream)
            self._copy_inputs(arena, env, host, device)
            if use_graph:
                if arena.graph is None:
                    arena.graph = self._capture(arena)
                arena.graph.launch(stream)
            else:
                self._issue(arena, env)
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
        except BaseException:
            self.stream.end_capture()  # leave the stream usable; the half-captured graph is dropped
            raise
        return self.stream.end_capture()

    def _issue(self, arena: DeviceArena, env: Mapping[str, int]) -> None:
        """The status flag cleared, then every launch of the plan at the grids of dims `env`, on the stream."""
        self.cp.cuda.runtime.memsetAsync(self.status.data.ptr, 0, self.status.nbytes, self.stream.ptr)
        for launch, blocks in launches_at(self.plan, env):
            if launch.call is not None:
                self.cublas.issue(launch.call, arena.pointers, env)
            else:
                self.functions[launch.kernel]((blocks,), (launch.block,), arena.arguments(launch), stream=self.stream)

    def _copy_inputs(self, arena: DeviceArena, env, host: dict[str, np.ndarray], device: dict[str, Any]) -> None:
        for label, buf in self.program.inputs.items():
            kind = storage(self.program.buffers[buf].dtype)
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
        """The shape stand-ins, with a device input the program takes as bfloat16 given as its uint16 bits (CuPy
        has no bfloat16; a KV pool on the device is held so) standing in as bfloat16."""
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
            view = arena.view(buf, int(np.prod(concrete, dtype=np.int64)), storage(d))
            if on_device:  # a copy: the arena is overwritten by the next run
                out[label] = view.copy().reshape(concrete)
            else:
                out[label] = view.get(stream=self.stream).view(d.np).reshape(concrete)
        return out
