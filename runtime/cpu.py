"""The CPU runtime: generated C compiled once by the system compiler, cached on disk, called once per run.

A forward pass is one call, `lm_run(buffers, dims)`, into the shared library: the kernels run back to back
inside it (OpenMP across the cores). The Python side only binds symbols, points the buffer table at the
inputs and at a per-shape arena (one allocation, laid out by compiler/analysis/memory.py) made on the first run
with those dims, and copies the outputs out. What else it needs of the program (the donated inputs it writes,
the weights read only as packed panels) it reads from the program's run plan (compiler/storage/run_plan.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from luminal import dtypes as dt
from luminal.compiler.analysis import memory
from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import COUNTERS, DERIVED, PACKED, RunPlan
from luminal.graph import Graph
from luminal.runtime import build_lock, huge_pages
from luminal.runtime.linker import link_flags
from luminal.runtime.reference import bind_symbols, bound_weights

# -ffp-contract=off: every operation rounds as the reference interpreter's numpy does; GCC's default under gnu11
# fuses a*b+c into one FMA, which breaks compensated formulas (expm1 of 3e-8 came out 2x off). Only the GEMM
# micro-kernels, whose sums are reordered anyway, opt back in (compiler/cpu/codegen_gemm.py).
CFLAGS = [
    "-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-fwrapv", "-fno-math-errno", "-ffp-contract=off",
    "-std=gnu11",
]  # fmt: skip
MAX_BINDINGS = 4096  # input shapes whose symbol values an executable remembers
_RELEASED = np.zeros(16, np.float32)  # where a released weight's table slot points: a valid, never read address


class CompilerMissing(RuntimeError):
    """No C compiler: the CPU target needs one (set CC, or install gcc/clang)."""


def cache_dir() -> Path:
    root = os.environ.get("LUMINAL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "luminal")
    path = Path(root) / "cpu-kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise CompilerMissing("the cpu target compiles C: no C compiler found (set CC or install gcc)")
    return cc


_VECTOR_MATH: dict[str, list[str]] = {}


def vector_math_flags(cc: str) -> list[str]:
    """["-DLM_VECTOR_MATH", "-lmvec"] where `cc` links glibc's vector math library, else [] (scalar libm)."""
    if cc not in _VECTOR_MATH:
        probe = '__attribute__((simd("notinbranch"))) float exp2f(float);\n'
        probe += "void f(float* x, int n) { for (int i = 0; i < n; i++) x[i] = exp2f(x[i]); }\n"
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "probe.c").write_text(probe)
            flags = ["-DLM_VECTOR_MATH", "-lmvec"]
            cmd = [cc, *CFLAGS, "-o", str(Path(tmp) / "probe.so"), str(Path(tmp) / "probe.c"), "-lmvec", "-lm"]
            ok = subprocess.run(cmd, capture_output=True).returncode == 0
        _VECTOR_MATH[cc] = flags if ok else []
    return _VECTOR_MATH[cc]


def build_library(source: str) -> Path:
    """The shared library for `source`, compiled once and cached by the hash of source and flags."""
    cc = compiler()
    flags = CFLAGS + vector_math_flags(cc)
    key = hashlib.sha256("\0".join([cc, *flags, source]).encode()).hexdigest()[:32]
    lib = cache_dir() / f"{key}.so"
    return build_lock.built_once(lib, lambda: _compile(cc, flags, source, lib))


def _compile(cc: str, flags: list[str], source: str, lib: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "program.c"
        src.write_text(source)
        out = Path(tmp) / "program.so"
        cmd = [cc, *flags, *link_flags(cc), "-o", str(out), str(src), "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"C compilation failed:\n{done.stderr[-4000:]}")
        staged = lib.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(out, staged)
        os.replace(staged, lib)  # atomic: a reader never sees a half-written library


def _np_storage(d: dt.DType) -> np.dtype:
    return np.dtype(np.uint16) if d == dt.bfloat16 else d.np


class CpuExecutable:
    def __init__(self, graph: Graph, program: ir.KernelProgram, source: str, weights: Mapping[str, np.ndarray], *,
                 plan: RunPlan):  # fmt: skip
        """`plan`: the program's run plan (compiler/storage/run_plan.py), which the compiler made with it."""
        self.graph = graph
        self.program = program
        self.plan = plan
        self.together = plan.together  # kernels run in one launch (a GPU program's, the host shims): live together
        self.slots = {name: k for k, name in enumerate(sorted(program.buffers))}
        self.symbols = sorted(program.symbols)
        self.library = ctypes.CDLL(str(self.build(source)))
        self.entry = self.library.lm_run
        self.entry.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)]
        self.entry.restype = ctypes.c_int
        self.table = (ctypes.c_void_p * len(self.slots))()
        self.fixed: dict[str, np.ndarray] = {}  # weights: bound once
        for label, buf in program.weights.items():
            self.fixed[buf] = np.ascontiguousarray(weights[label]).view(_np_storage(program.buffers[buf].dtype))
        packed = {n: (b.size.evaluate({}), np.float32) for n, b in program.buffers.items() if b.role == PACKED}
        self.fixed.update(huge_pages.zeroed_together(packed))  # weight panels, filled once by lm_prepare below
        for name, buf in program.buffers.items():
            if buf.role == COUNTERS:  # a CUDA program's arrival counters (the host shim): zero, kept between runs
                self.fixed[name] = np.zeros(int(buf.size.evaluate({})), np.int32)
            if buf.role == DERIVED:  # a GPU program's weights copied at load (the host shims): by lm_prepare
                self.fixed[name] = np.zeros(int(buf.size.evaluate({})), _np_storage(buf.dtype))
        for name, arr in self.fixed.items():
            self.table[self.slots[name]] = arr.ctypes.data
        prepare = self.library.lm_prepare
        prepare.argtypes, prepare.restype = self.entry.argtypes, ctypes.c_int
        # No packed or derived buffer depends on a symbol; D only has to point at one value per symbol.
        if self.prepare(prepare):
            raise IndexError("a gather index was out of range while preparing the weights at load")
        self.arenas: dict[tuple, dict[str, np.ndarray]] = {}  # symbol values -> views into that binding's arena
        self.plans: dict[tuple, memory.MemoryPlan] = {}
        self.written = set(plan.written_inputs)  # donated inputs the program writes in place
        # Per call, only the inputs' addresses change: what their shapes bind, and where that binding's arena
        # lies, are worked out once per set of shapes (a decode step repeats the same few).
        self._envs: dict[tuple, dict[str, int]] = {}
        self._placed: dict[tuple, tuple[dict[str, np.ndarray], list[tuple[int, int]], dict[str, tuple]]] = {}
        self._table_at: tuple | None = None  # the binding whose arena the table points at now
        self._storage = {buf: _np_storage(program.buffers[buf].dtype) for buf in program.inputs.values()}
        # Inputs given again as the very same array (a LoRA bank's stacks, an engine's KV pools, every decode
        # step): their address is kept (a weak reference, so a dead array is never mistaken for a new one at its
        # address) and not worked out again. Not for an input handed back as an output unless it is donated:
        # the run hands back the caller's array itself (a 125M Llama step's 24 pools took ~80 us a step).
        outputs = {buf for buf, _ in program.outputs.values()}
        self._steady = set(program.inputs.values()) - (outputs - self.written)
        self._addresses: dict[str, tuple[weakref.ref, int]] = {}

    def rebind_weights(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Read each weight named in `arrays` from that array from now on (an equal copy), and let go of the
        others, which must be ones `lm_run` never reads (the run plan's `packed_only`): their panels are packed."""
        unread = set(self.plan.packed_only)
        for label, buf in self.program.weights.items():
            if label in arrays:
                self.fixed[buf] = np.ascontiguousarray(arrays[label]).view(_np_storage(self.program.buffers[buf].dtype))
            elif buf in unread:
                # The kernel's prologue still loads the pointer from the table; it is never dereferenced.
                self.fixed[buf] = _RELEASED
            else:
                raise ValueError(f"weight {label!r} is read by the program: it cannot be released")
            self.table[self.slots[buf]] = self.fixed[buf].ctypes.data

    def prepare(self, entry) -> int:
        """`lm_prepare(table, D)`: the weights' panels packed (and a GPU program's derived buffers computed)."""
        return entry(self.table, (ctypes.c_int64 * max(len(self.symbols), 1))())

    def build(self, source: str) -> Path:
        """The shared library holding `lm_run` and `lm_prepare` (the CUDA host shim builds its own)."""
        return build_library(source)

    def call(self, table, env: dict[str, int]) -> int:
        """One forward pass: `lm_run(table, D)` with the dims block D at `env`; nonzero when an index was out of
        range (the CUDA host shim also passes the dims its grids are sized for)."""
        dims_array = (ctypes.c_int64 * max(len(self.symbols), 1))(*[env[s] for s in self.symbols])
        return self.entry(table, dims_array)

    def _arena(self, env: dict[str, int]) -> dict[str, np.ndarray]:
        key = tuple(env[s] for s in self.symbols)
        arena = self.arenas.get(key)
        if arena is None:  # first run with these dims: plan, then one allocation holds every intermediate
            plan = memory.plan(self.program, env, self.together)
            # numpy aligns less than memory.ALIGN: over-allocate and start the arena at an aligned address.
            raw = np.empty(plan.arena_bytes + memory.ALIGN, np.uint8)
            base = -raw.ctypes.data % memory.ALIGN
            arena = {}
            for name, offset in plan.offsets.items():
                start = base + offset
                view = raw[start : start + plan.sizes[name]]  # each view keeps `raw` alive
                arena[name] = view.view(_np_storage(self.program.buffers[name].dtype))
            self.plans[key] = plan
            self.arenas[key] = arena
        return arena

    def _bind(self, arrays: dict[str, np.ndarray], dims: Mapping[str, int] | None) -> dict[str, int]:
        """bind_symbols, remembered by the inputs' shapes and dtypes (and `dims`): it reads nothing else."""
        key = (tuple(sorted((dims or {}).items())), *((k, v.shape, v.dtype) for k, v in arrays.items()))
        env = self._envs.get(key)
        if env is None:
            if len(self._envs) >= MAX_BINDINGS:  # a server seeing every prompt length: forget, do not grow
                self._envs.clear()
            env = self._envs[key] = bind_symbols(self.graph, arrays, dims)
        return dict(env)

    def _place(self, env: dict[str, int]) -> tuple[dict[str, np.ndarray], dict[str, tuple[tuple[int, ...], int]]]:
        """Point the table at the arena for `env`; (the arena, each output's shape and element count). Both, and
        the arena's addresses, are worked out once per binding (a decode step evaluated its logits' shape and
        multiplied it out every step: ~25 us of a 2.5 ms int8 step)."""
        key = tuple(env[s] for s in self.symbols)
        placed = self._placed.get(key)
        if placed is None:
            arena = self._arena(env)
            shapes = {}
            for label, (_, shape) in self.program.outputs.items():
                concrete = tuple(int(d.evaluate(env)) for d in shape)
                shapes[label] = concrete, math.prod(concrete)
            addresses = [(self.slots[n], a.ctypes.data) for n, a in arena.items()]
            placed = self._placed[key] = (arena, addresses, shapes)
        arena, addresses, shapes = placed
        if key == self._table_at:  # a decode step's binding, again: only the inputs' slots change between runs
            return arena, shapes
        table = self.table
        for slot, address in addresses:
            table[slot] = address
        self._table_at = key
        return arena, shapes

    def run(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        arrays = {k: v if isinstance(v, np.ndarray) else np.asarray(v) for k, v in inputs.items()}
        env = self._bind(arrays, dims)
        arena, shapes = self._place(env)
        table = self.table
        given: dict[str, np.ndarray] = {}  # input buffer -> the contiguous array the kernels read (and may write)
        bound: dict[str, np.ndarray] = {}  # input buffer -> that array as the kernels' storage dtype
        addresses = self._addresses
        for label, buf in self.program.inputs.items():
            array = arrays[label]
            known = addresses.get(buf)
            if known is not None and known[0]() is array and (buf not in self.written or array.flags.writeable):
                table[self.slots[buf]] = known[1]
                given[buf] = array  # a donated input's output
                continue
            given[buf] = a = np.ascontiguousarray(array)
            if buf in self.written and not a.flags.writeable:  # a donated input the caller cannot give up
                given[buf] = a = a.copy()
            a = a.view(self._storage[buf])
            bound[buf] = a if a.size else np.zeros(1, a.dtype)  # an empty input still needs a valid pointer
            table[self.slots[buf]] = address = bound[buf].ctypes.data
            if buf in self._steady and given[buf] is array and a.size:  # the caller's memory, not a copy
                addresses[buf] = (weakref.ref(array), address)
        if self.call(table, env):
            raise IndexError("a gather or scatter index was out of range")
        out = {}
        for label, (buf, _) in self.program.outputs.items():
            if buf in self.written:  # a donated input written in place (compiler/kernels/in_place.py): handed back
                out[label] = given[buf]
                continue
            concrete, n = shapes[label]
            source = bound.get(buf, arena.get(buf))
            source = self.fixed[buf] if source is None else source
            out[label] = source[:n].copy().view(self.program.buffers[buf].dtype.np).reshape(concrete)
        return out


class CpuRuntime:
    """`CpuRuntime().load(program, weights=None) -> CpuExecutable` for a CompiledProgram of target "cpu"."""

    name = "cpu"
    executable = CpuExecutable  # what a loaded program becomes (the CUDA host shim's runtime swaps its own in)

    def load(self, program, weights: Mapping[str, np.ndarray] | None = None) -> CpuExecutable:
        graph = program.graph
        weights = bound_weights(graph, weights)
        return self.executable(graph, program.kernels, program.source, weights, plan=program.plan)
