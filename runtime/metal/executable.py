"""A program loaded on an Apple GPU: one MSL library, a compute pipeline per kernel, resident weights, and each
forward pass encoded into one command buffer.

Load: the MSL compiled once (MSL 3.1 for bfloat, fast math off: every op rounds as the reference does), each
launch's function looked up by name and made a pipeline, checked to allow the launch's threadgroup size; each
weight copied once into its own MTLBuffer; then the load plan encoded once into a command buffer of its own:
the buffers computed from weights alone (compiler/kernels/derived_weights.py), each in its own MTLBuffer, after which a
weight only those dispatches read is let go. Memory is unified: buffers are in shared storage, so inputs are
written into and outputs read from the arena's bytes in place, with no blit.
Run: the symbols bound from the inputs' shapes; the arena of their shape bucket (runtime/cuda/buckets.py: one
allocation per bucket, laid out by the memory plan, runtime/cuda/layout.py) found or allocated; the inputs copied
into their slots and the status flag cleared; then one command buffer with one compute encoder: per launch its
pipeline, its buffers at their offsets in launch order, the live dims through `setBytes` (the small constant
buffer `D`), the status flag, and `dispatchThreadgroups` at the live dims' grid. The encoder's dispatches run in
order (a serial compute encoder), so each kernel sees the previous ones' writes. One commit, one wait, then the
outputs and the status flag (a gather or scatter index out of range raises IndexError).
In place: a donated input the program writes (compiler/kernels/in_place.py: a KV pool's scatter) given as a MetalArray
(runtime/metal/arrays.py; `executable.array(value)` makes one) is not copied into its slot: the dispatches bind
the caller's buffer instead, the scatter writes it there, and the run hands that same MetalArray back.

The Metal module is passed in (`api`), never imported here.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

import numpy as np

from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import DERIVED, PACKED, Launch, RunPlan
from luminal.graph import Graph
from luminal.runtime.cuda import buckets
from luminal.runtime.cuda.layout import Layout, launches_at, layout
from luminal.runtime.metal.arrays import MetalArray, host_bytes, shared_buffer, storage, to_metal
from luminal.runtime.reference import ExecutionError, bind_symbols

STATUS_BYTES = 4  # lm_status: one int


class MetalError(RuntimeError):
    """Metal refused the program (compilation, a pipeline) or a command buffer failed; the message says which."""


def _checked(result: Any, what: str) -> Any:
    """PyObjC returns (object, error) for a method with an NSError** argument."""
    value, error = result if isinstance(result, tuple) else (result, None)
    if value is None:
        detail = error.localizedDescription() if error is not None else "no error given"
        raise MetalError(f"{what} failed: {detail}")
    return value


class Arena:
    """One shape bucket's allocation: every temp, output and input slot of the program at the bucket's dims."""

    def __init__(self, api: Any, device: Any, program: ir.KernelProgram, env: Mapping[str, int], together=()):
        self.layout: Layout = layout(program, env, together)  # what a merged dispatch touches kept live over it
        self.buffer = device.newBufferWithLength_options_(max(self.layout.total, 1), api.MTLResourceStorageModeShared)
        self.bytes = host_bytes(self.buffer)

    def view(self, name: str, count: int, kind: np.dtype) -> np.ndarray:
        start = self.layout.offsets[name]
        return self.bytes[start : start + count * kind.itemsize].view(kind)


class MetalExecutable:
    def __init__(self, api: Any, graph: Graph, program: ir.KernelProgram, source: str, weights: Mapping[str, Any],
                 *, plan: RunPlan):  # fmt: skip
        """`plan`: the program's run plan (compiler/storage/run_plan.py): the dispatches of a run and of the load."""
        packed = [name for name, b in program.buffers.items() if b.role == PACKED]
        if packed:  # the CPU GEMM's weight panels: a Metal program reads its weights as they are
            raise ValueError(f"a Metal program has no packed weight buffers, this one has {packed[:4]}")
        self.api, self.graph, self.program = api, graph, program
        self.lock = threading.Lock()  # one run at a time: the arenas and the status flag are shared
        self.symbols = sorted(program.symbols)
        self.plan, self.load = list(plan.launches), list(plan.at_load)
        self.together = plan.together
        self.device = api.MTLCreateSystemDefaultDevice()
        self.queue = self.device.newCommandQueue()
        self.pipelines = self._pipelines(source)
        self.weights = {b: self._upload(weights[label], program.buffers[b]) for label, b in program.weights.items()}
        self.weight_uploads = len(self.weights)  # what the load copied; runs copy no weight again
        self.status = self.device.newBufferWithLength_options_(STATUS_BYTES, api.MTLResourceStorageModeShared)
        self.arenas: dict[tuple[int, ...], Arena] = {}
        self.in_place = dict(plan.written_inputs)  # input buffer -> input name
        self._derive()

    def _pipelines(self, source: str) -> dict[str, Any]:
        api, options = self.api, self.api.MTLCompileOptions.new()
        options.setFastMathEnabled_(False)  # fast math would reassociate and flush: results would leave the reference
        options.setLanguageVersion_(api.MTLLanguageVersion3_1)  # bfloat
        library = _checked(self.device.newLibraryWithSource_options_error_(source, options, None), "compiling the MSL")
        pipelines = {}
        for launch in [*self.load, *self.plan]:
            function = library.newFunctionWithName_(launch.kernel)
            if function is None:
                raise MetalError(f"the MSL library has no kernel {launch.kernel}")
            made = self.device.newComputePipelineStateWithFunction_error_(function, None)
            pipeline = _checked(made, f"the pipeline of {launch.kernel}")
            if pipeline.maxTotalThreadsPerThreadgroup() < launch.block:
                raise MetalError(f"kernel {launch.kernel} needs threadgroups of {launch.block} threads; this device "
                                 f"allows it {pipeline.maxTotalThreadsPerThreadgroup()}")  # fmt: skip
            pipelines[launch.kernel] = pipeline
        return pipelines

    def _upload(self, value: Any, buf: ir.Buffer) -> Any:
        """A weight as a resident MTLBuffer of its storage dtype's bytes."""
        array = np.ascontiguousarray(np.asarray(value)).reshape(-1).view(storage(buf.dtype))
        if array.size != int(buf.size.evaluate({})) or array.dtype.itemsize != buf.dtype.itemsize:
            raise ValueError(f"weight {buf.label!r}: {array.size} elements of {array.dtype}, expected "
                             f"{buf.size} of {buf.dtype.name}")  # fmt: skip
        return shared_buffer(self.device, self.api, array.tobytes())

    def _derive(self) -> None:
        """The load plan, once: every derived buffer computed from the weights; then a weight only those
        dispatches read is let go, since no run reads it."""
        if not self.load:
            return
        for name, b in self.program.buffers.items():
            if b.role == DERIVED:  # its size is known at compile time: no dims are bound at load
                size = int(b.size.evaluate({})) * b.dtype.itemsize
                self.weights[name] = shared_buffer(self.device, self.api, bytes(size))
        host_bytes(self.status)[...] = 0
        self._encode_and_wait(self.load, dict.fromkeys(self.symbols, 0), None, {})  # no derived kernel reads a dim
        if int(host_bytes(self.status).view(np.int32)[0]):
            raise IndexError("a gather index was out of range while deriving buffers from the weights at load")
        read = {buf for launch in self.plan for buf in launch.buffers}
        for buf in set(self.program.weights.values()) - read:
            del self.weights[buf]

    def array(self, value: Any) -> MetalArray:
        """`value` copied once into a buffer of this executable's device: a donated input given so (a KV pool)
        is written in place by every run it is passed to."""
        return to_metal(self.device, self.api, value)

    def arena(self, env: Mapping[str, int]) -> Arena:
        """The arena of the bucket that dims `env` fall in, allocated on first use."""
        sized = buckets.bucket(env, self.program.symbols)
        key = buckets.key(sized, self.symbols)
        if key not in self.arenas:
            self.arenas[key] = Arena(self.api, self.device, self.program, sized, self.together)
        return self.arenas[key]

    def run(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """Outputs by name as numpy arrays, but a donated input given as a MetalArray and written in place comes
        back as that MetalArray. Inputs: numpy arrays (or what numpy converts) or MetalArrays."""
        arrays = {k: v.numpy() if isinstance(v, MetalArray) else np.asarray(v) for k, v in inputs.items()}
        with self.lock:
            env = bind_symbols(self.graph, arrays, dims)
            arena = self.arena(env)
            given = {b: inputs[label] for b, label in self.in_place.items() if isinstance(inputs[label], MetalArray)}
            self._copy_inputs(arena, arrays, given)
            host_bytes(self.status)[...] = 0
            self._encode_and_wait(self.plan, env, arena, {b: array.buffer for b, array in given.items()})
            failed = int(host_bytes(self.status).view(np.int32)[0])
            outputs = self._outputs(arena, env, given)
        if failed:
            raise IndexError("a gather or scatter index was out of range")
        return outputs

    def _copy_inputs(self, arena: Arena, arrays: Mapping[str, np.ndarray], in_place: Mapping[str, Any]) -> None:
        """Each input copied into its arena slot, but those the dispatches bind where the caller holds them."""
        for label, buf in self.program.inputs.items():
            if buf not in in_place:
                flat = np.ascontiguousarray(arrays[label]).reshape(-1).view(storage(self.program.buffers[buf].dtype))
                arena.view(buf, flat.size, flat.dtype)[...] = flat

    def _encode_and_wait(self, plan: list[Launch], env: Mapping[str, int], arena: Arena | None,
                         bound: Mapping[str, Any]) -> None:  # fmt: skip
        """The whole plan in one command buffer, committed and waited for; `bound` holds the caller's buffers
        bound in place of their arena slots (buffer -> MTLBuffer). The load plan has no arena: it reads and
        writes the resident buffers alone."""
        api = self.api
        dims = np.array([env[s] for s in self.symbols] or [0], np.int64).tobytes()
        commands = self.queue.commandBuffer()
        encoder = commands.computeCommandEncoder()
        whole = {**self.weights, **bound}  # buffers bound from their first byte; the rest lie in the arena
        for launch, groups in launches_at(plan, env):
            encoder.setComputePipelineState_(self.pipelines[launch.kernel])
            for slot, name in enumerate(launch.buffers):
                if name in whole:
                    encoder.setBuffer_offset_atIndex_(whole[name], 0, slot)
                else:
                    encoder.setBuffer_offset_atIndex_(arena.buffer, arena.layout.offsets[name], slot)
            n = len(launch.buffers)
            encoder.setBytes_length_atIndex_(dims, len(dims), n)
            encoder.setBuffer_offset_atIndex_(self.status, 0, n + 1)
            encoder.dispatchThreadgroups_threadsPerThreadgroup_(
                api.MTLSizeMake(groups, 1, 1), api.MTLSizeMake(launch.block, 1, 1)
            )
        encoder.endEncoding()
        commands.commit()
        commands.waitUntilCompleted()
        if commands.status() != api.MTLCommandBufferStatusCompleted:
            error = commands.error()
            raise ExecutionError(f"the command buffer failed: {error.localizedDescription() if error else 'unknown'}")

    def _outputs(self, arena: Arena, env: Mapping[str, int], given: Mapping[str, MetalArray]) -> dict[str, Any]:
        """Outputs copied out of the arena; a buffer written in the caller's MetalArray (`given`) is that array."""
        out = {}
        for label, (buf, shape) in self.program.outputs.items():
            if buf in given:
                out[label] = given[buf]
                continue
            concrete = tuple(int(d.evaluate(dict(env))) for d in shape)
            d = self.program.buffers[buf].dtype
            view = arena.view(buf, int(np.prod(concrete, dtype=np.int64)), storage(d))
            out[label] = view.copy().view(d.np).reshape(concrete)
        return out
