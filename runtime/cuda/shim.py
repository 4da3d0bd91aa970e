"""Runs a CUDA program on the CPU: its generated source compiled as C++ against the host shim's stand-in headers.

This is how the meaning of the generated CUDA is checked on a machine without a GPU. The source is compiled
unchanged by g++ -std=c++20 with host_shim/cuda_shim.h force-included, together with a small driver written
from the program's launch plan: `lm_run(buffers, dims)` launches every kernel as the plan says (its block count
evaluated at the dims, each block's threads run as fibers with real barriers); a "cublas" step calls the stand-in
for cublasGemmStridedBatchedEx (host_shim/lm_cublas.h) with the arguments the runtime gives cuBLAS. The rest is
the CPU runtime's: the same buffer table, arena and I/O (runtime/cpu.py), so a shim executable runs exactly
like a CPU one.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import Launch, LibraryGemm, RunPlan
from luminal.runtime import build_lock, precompiled_header
from luminal.runtime.cpu import CompilerMissing, CpuExecutable, CpuRuntime
from luminal.runtime.cpu import cache_dir as cpu_cache_dir
from luminal.runtime.cuda import buckets
from luminal.runtime.cuda.cublas import DATA_TYPE
from luminal.runtime.linker import link_flags

SHIM = Path(__file__).resolve().parent / "host_shim"
FIBERS = Path(__file__).resolve().parents[1] / "host_fibers"  # how a block's threads run (lm_fibers.h)
HUNG = 2  # what lm_run and lm_kernel_<name> return when a block's threads waited at different barriers
# A fiber returns on a stack it switched to (runtime/host_fibers/): a shadow stack (x86's CET) cannot follow that.
NO_SHADOW_STACK = ["-fcf-protection=none"] if platform.machine() in ("x86_64", "AMD64") else []
# Each buffer's pointer type as the CUDA dialect spells it (compiler/renderer/dialects.py; a test holds the two
# equal): the driver casts each table entry to the type its kernel takes.
STORAGE = {dt.float32: "float", dt.float16: "__half", dt.bfloat16: "__nv_bfloat16", dt.float64: "double",
           dt.bool_: "uint8_t", **{d: f"{d.name}_t" for d in dt.INTEGERS}}  # fmt: skip
# -ffp-contract=off: as --fmad=false on the GPU, every op rounds as the reference does (fmaf stays an FMA).
# -O0: a shim library is built for a test or two runs of small shapes, so the build is most of its cost: -O1 took
# ~1.5x the CPU to build and the test files' total (build and runs) was 1.3-1.5x -O0's (the op suite's reductions
# and normalisations, 71-75 s against 47-51 s). What a program computes is the same: SSE arithmetic, no
# contraction, -fwrapv, and the fibers' 512 KiB stacks hold -O0's larger frames (an overflow is caught).
FLAGS = ["-std=c++20", "-O0", "-pthread", "-fPIC", "-shared", "-fwrapv", "-ffp-contract=off", "-w", *NO_SHADOW_STACK]


def driver(p: ir.KernelProgram, plan: list[Launch], once: list[Launch]) -> str:
    """`lm_run_grid(B, D, G)`: every launch of `plan` (a run's), its pointers read from the buffer table by slot,
    its block count evaluated at the dims G while the kernels read the dims D (a CUDA graph captured for a shape
    bucket launches so); `lm_run(B, D)` is the exact launch, G = D. `lm_prepare(B, D)`: the load's launches
    `once` (the kernels of derived buffers), which the CPU runtime calls once after binding the weights."""
    lines = ['#include "lm_cublas.h"'] if any(launch.call is not None for launch in [*once, *plan]) else []
    lines += _entry("lm_run_grid(void** B, const int64_t* D, const int64_t* G)", p, plan)
    lines += _entry("lm_prepare(void** B, const int64_t* D)", p, once, grid="D")
    lines += ['extern "C" int lm_run(void** B, const int64_t* D) { return lm_run_grid(B, D, D); }']
    return "\n".join(lines) + "\n"


def entries(p: ir.KernelProgram, plan: RunPlan) -> str:
    """What a shim build adds to the program's source, from its run plan: the driver, then an entry per kernel."""
    return driver(p, list(plan.launches), list(plan.at_load)) + kernel_entries(p, [*plan.at_load, *plan.launches])


def _entry(signature: str, p: ir.KernelProgram, plan: list[Launch], grid: str = "G") -> list[str]:
    """An extern "C" function that issues every launch of `plan`, its grids at the dims `grid` points at."""
    slots = {name: k for k, name in enumerate(sorted(p.buffers))}
    lines = [f'extern "C" int {signature} {{', "  int lm_status = 0;"]
    lines += [f"  const int64_t {s} = {grid}[{j}]; (void){s};" for j, s in enumerate(sorted(p.symbols))]
    for launch in plan:
        if launch.call is not None:
            lines.append(f"  if ({launch.grid.render_c()} > 0) {library_call(launch.call, slots)}")
            continue
        args = []
        for j, name in enumerate(launch.buffers):
            const = "" if j < launch.writes else "const "
            args.append(f"({const}{STORAGE[p.buffers[name].dtype]}*)B[{slots[name]}]")
        call = f"lm_launch({launch.kernel}, lm_blocks, {launch.block}, {', '.join(args)}, D, &lm_status);"
        call += f" if (lm_fibers_hung()) return {HUNG};"
        lines.append(f"  {{ const int64_t lm_blocks = {launch.grid.render_c()}; if (lm_blocks > 0) {call} }}")
    return [*lines, "  return lm_status;", "}"]


def library_call(call: LibraryGemm, slots: dict[str, int]) -> str:
    """A "cublas" step as the host shim's stand-in computes it (host_shim/lm_cublas.h), its extents at G."""
    args = [*(str(int(x.transpose)) for x in (call.a, call.b)), call.m.render_c(), call.n.render_c(), str(call.k)]
    for x in (call.a, call.b, call.c):
        const = "" if x is call.c else "const "
        pointer = f"({const}char*)B[{slots[x.buffer]}] + {x.offset * x.dtype.itemsize}"
        args += [pointer, str(DATA_TYPE[x.dtype]), str(x.ld), str(x.batch_stride)]
    return f"lm_cublas_gemm({', '.join([*args, call.batch.render_c()])});"


def kernel_entries(p: ir.KernelProgram, plan: list[Launch]) -> str:
    """`lm_kernel_<name>(P, blocks)` per launch of `plan`: one kernel launched alone, its
    arguments (buffers, D, lm_status) the pointers in P, as a CUDA driver launch passes them; what a stand-in for
    CuPy calls in the tests. It returns HUNG where the launch hung, else 0."""
    lines = []
    for launch in plan:
        if launch.call is not None:
            continue  # not a kernel: the runtime issues the library call
        args = []
        for j, name in enumerate(launch.buffers):
            const = "" if j < launch.writes else "const "
            args.append(f"({const}{STORAGE[p.buffers[name].dtype]}*)P[{j}]")
        n = len(launch.buffers)
        args += [f"(const int64_t*)P[{n}]", f"(int*)P[{n + 1}]"]
        lines.append(f'extern "C" int lm_kernel_{launch.kernel}(void** P, int64_t blocks) '
                     f"{{ lm_launch({launch.kernel}, blocks, {launch.block}, {', '.join(args)}); "
                     f"return lm_fibers_hung() ? {HUNG} : 0; }}")  # fmt: skip
    return "\n".join(lines) + "\n"


def unless_hung(status: int) -> int:
    """`status` as a shim library's entry returned it; raises where a launch hung (on a GPU it never ends)."""
    if status == HUNG:
        raise RuntimeError(
            "a launch hung: the threads of a block waited at different barriers, or some returned while the others "
            "waited at one (on a GPU the launch would never finish)"
        )
    return status


def compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        raise CompilerMissing("the CUDA host shim compiles C++20: no C++ compiler found (set CXX or install g++)")
    return cxx


def compile_flags(flags: list[str]) -> list[str]:
    """A library build's flags less the link's (-shared): those a header precompiled for it is built with."""
    return [f for f in flags if f != "-shared"]


def header_files(folder: Path = SHIM) -> list[Path]:
    """The stand-in headers a shim build reads (what its cache key hashes): `folder`'s (the CUDA shim's, or the
    Metal shim's) and the fibers'."""
    return [*sorted(folder.iterdir()), *sorted(FIBERS.iterdir())]


def build_library(
    source: str, arch: str | None = None, reversed_blocks: bool = False, defines: tuple[str, ...] = ()
) -> Path:
    """The shared library of `source` (CUDA plus driver) built through the shim, cached by hash. `arch` ("75")
    defines __CUDA_ARCH__ as a device compile for it would, so a source's paths for older GPUs run too;
    `reversed_blocks` runs every launch's blocks, and each block's threads, last first (a GPU runs them in no set
    order); `defines` are more macros (LM_FIBERS_UCONTEXT: the fibers' portable switch, lm_fibers.h)."""
    cxx = compiler()
    flags = FLAGS if arch is None else [*FLAGS, f"-D__CUDA_ARCH__={int(arch) * 10}"]
    flags = [*flags, "-DLM_SHIM_REVERSED_BLOCKS"] if reversed_blocks else flags
    flags = [*flags, *(f"-D{name}" for name in defines)]
    headers = "".join(path.read_text() for path in header_files())
    key = hashlib.sha256("\0".join([cxx, *flags, headers, source]).encode()).hexdigest()[:32]
    lib = cpu_cache_dir().parent / "cuda-shim" / f"{key}.so"
    return build_lock.built_once(lib, lambda: _compile(cxx, flags, headers, source, lib))


def _compile(cxx: str, flags: list[str], headers: str, source: str, lib: Path) -> None:
    includes, pchs = ["-I", str(SHIM), "-I", str(FIBERS)], lib.parent / "pch"
    pch = precompiled_header.folder(cxx, compile_flags(flags), SHIM / "cuda_shim.h", includes, headers, pchs)
    includes = ["-I", str(pch), *includes] if pch else includes
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "program.cu", Path(tmp) / "program.so"
        src.write_text(source)
        build = [*flags, *link_flags(cxx), "-x", "c++", *includes, "-include", "cuda_shim.h"]
        cmd = [cxx, *build, "-o", str(out), str(src)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the CUDA source did not compile through the host shim:\n{done.stderr[-4000:]}")
        staged = lib.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(out, staged)
        os.replace(staged, lib)


class ShimExecutable(CpuExecutable):
    arch: str | None = None  # the __CUDA_ARCH__ the source is built for (ShimRuntime(arch=...)); None: none
    reversed_blocks = False  # blocks and their threads last first (ShimRuntime(reversed_blocks=True))

    def build(self, source: str) -> Path:
        return build_library(source + "\n" + entries(self.program, self.plan), self.arch, self.reversed_blocks)

    def prepare(self, entry) -> int:
        return unless_hung(super().prepare(entry))

    def call(self, table, env: dict[str, int]) -> int:
        return unless_hung(super().call(table, env))

    def _arena(self, env: dict[str, int]) -> dict[str, np.ndarray]:
        """The CPU runtime's arena, its bytes set to 0xFF (NaN, -1) when it is made, as a device allocation holds
        whatever was there: a kernel that reads what no kernel before it wrote (a block that runs before the
        one it waits for) reads that, not the zeros or the previous run's values that fresh memory may hold."""
        fresh = tuple(env[s] for s in self.symbols) not in self.arenas
        arena = super()._arena(env)
        if fresh:
            for view in arena.values():
                view.view(np.uint8).fill(0xFF)
        return arena


class BucketShimExecutable(ShimExecutable):
    """Runs as a CUDA graph captured for a shape bucket would: every grid and the arena sized for the bucket of
    the live dims (runtime/cuda/buckets.py), the live dims in D. What it computes must not depend on that."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.grid_entry = self.library.lm_run_grid
        self.grid_entry.argtypes = [*self.entry.argtypes, ctypes.POINTER(ctypes.c_int64)]
        self.grid_entry.restype = ctypes.c_int

    def _arena(self, env: dict[str, int]) -> dict[str, np.ndarray]:
        return super()._arena(buckets.bucket(env, self.program.symbols))

    def call(self, table, env: dict[str, int]) -> int:
        grid = buckets.bucket(env, self.program.symbols)
        live, sized = ((ctypes.c_int64 * max(len(self.symbols), 1))(*[e[s] for s in self.symbols]) for e in (env, grid))
        return unless_hung(self.grid_entry(table, live, sized))


class ShimRuntime(CpuRuntime):
    """`ShimRuntime().load(program)`: a program compiled for a CUDA target, run on the CPU through the shim;
    `ShimRuntime(buckets=True)` launches as the CUDA runtime's graphs do, at the bucket's grids;
    `ShimRuntime(arch="75")` builds the source as a compile for that architecture sees it (__CUDA_ARCH__);
    `ShimRuntime(reversed_blocks=True)` runs each launch's blocks, and their threads, last first, as a GPU may."""

    name = "cuda-shim"

    def __init__(self, buckets: bool = False, arch: str | None = None, reversed_blocks: bool = False):
        base = BucketShimExecutable if buckets else ShimExecutable
        self.executable = type(base.__name__, (base,), {"arch": arch, "reversed_blocks": reversed_blocks})
