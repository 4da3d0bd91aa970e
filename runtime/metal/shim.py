"""Runs a Metal program on the CPU: its generated MSL compiled as C++20 against the stand-in `metal_stdlib`
(host_shim/), each dispatch's threadgroups run one by one, their threads as fibers with real barriers and SIMD
shuffles (runtime/host_fibers/).

This is how the meaning of the generated MSL is checked on a machine without an Apple GPU. The source is the
program's MSL with one change C++ needs: a threadgroup variable, declared at kernel scope, becomes a static so
that the threads running one threadgroup share it (C++ has no address spaces; the stand-in header drops the
qualifiers elsewhere). The driver is the CUDA shim's (runtime/cuda/shim.py): the same launch plan, the pointer
types spelled as the MSL prelude also names them, and the stand-in's `lm_launch` passes each thread its
threadgroup and thread positions. The rest is the CPU runtime's: buffer table, arena and I/O (runtime/cpu.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import RunPlan
from luminal.runtime import build_lock, precompiled_header
from luminal.runtime.cpu import CpuExecutable, CpuRuntime
from luminal.runtime.cpu import cache_dir as cpu_cache_dir
from luminal.runtime.cuda import shim as cuda_shim
from luminal.runtime.linker import link_flags

HEADERS = Path(__file__).resolve().parent / "host_shim"
# The CUDA shim's build (-ffp-contract=off: every op rounds as the reference does; the runtime compiles MSL
# without fast math).
FLAGS = cuda_shim.FLAGS
CHECK_FLAGS = ["-std=c++20", "-fsyntax-only", "-Wno-attributes", "-Wno-unknown-pragmas"]
_KERNEL_SCOPE_THREADGROUP = re.compile(r"^(\s+)(?:threadgroup|__shared__) ", re.MULTILINE)


def as_cpp(msl: str) -> str:
    """The MSL with its kernel-scope threadgroup variables as statics (shared by the threadgroup's threads)."""
    return _KERNEL_SCOPE_THREADGROUP.sub(r"\1static ", msl)


INCLUDES = ["-I", str(HEADERS), "-I", str(cuda_shim.FIBERS)]


def _run_compiler(args: list[str], source: str, what: str, first: list[str] = ()) -> subprocess.CompletedProcess:
    """The compiler on `source` with `args`; `first`: include folders searched before the stand-in's."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "program.metal"
        src.write_text(source)
        cmd = [cuda_shim.compiler(), *args, "-x", "c++", *first, *INCLUDES, str(src)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    if done.returncode != 0:
        raise RuntimeError(f"the MSL did not {what} against the stand-in metal_stdlib:\n{done.stderr[-4000:]}")
    return done


def check_source(msl: str) -> None:
    """Compile the MSL as C++ against the stand-in header (no code is generated); raises with the errors."""
    _run_compiler(CHECK_FLAGS, msl, "compile")


def build_library(msl: str, driver: str) -> Path:
    """The shared library of the MSL and its driver, cached by hash."""
    source = as_cpp(msl) + "\n" + driver
    headers = "".join(p.read_text() for p in cuda_shim.header_files(HEADERS))
    key = hashlib.sha256("\0".join([cuda_shim.compiler(), *FLAGS, headers, source]).encode()).hexdigest()[:32]
    lib = cpu_cache_dir().parent / "metal-shim" / f"{key}.so"
    return build_lock.built_once(lib, lambda: _compile(source, headers, lib))


def _compile(source: str, headers: str, lib: Path) -> None:
    # The MSL's first line includes <metal_stdlib>: GCC reads its precompiled form from the first include folder.
    cxx, flags = cuda_shim.compiler(), cuda_shim.compile_flags(FLAGS)
    pch = precompiled_header.folder(cxx, flags, HEADERS / "metal_stdlib", INCLUDES, headers, lib.parent / "pch")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "program.so"
        link = link_flags(cxx)
        _run_compiler([*FLAGS, *link, "-o", str(out)], source, "build", ["-I", str(pch)] if pch else [])
        staged = lib.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(out, staged)
        os.replace(staged, lib)


def entries(program: ir.KernelProgram, plan: RunPlan) -> str:
    """`lm_run` over the run's launches, `lm_prepare` over the load's, and `lm_kernel_<name>(P, groups)` per launch
    of either (one dispatch alone, its arguments the pointers in P: what the stand-in Metal device in the tests
    calls), from Metal's run plan (no tensor-core GEMMs, flash decoding's split and combine apart)."""
    return cuda_shim.entries(program, plan)


class MetalShimExecutable(CpuExecutable):
    def build(self, source: str) -> Path:
        return build_library(source, entries(self.program, self.plan))

    def call(self, table, env: dict[str, int]) -> int:
        return cuda_shim.unless_hung(super().call(table, env))


class MetalShimRuntime(CpuRuntime):
    """`MetalShimRuntime().load(program)`: a program compiled for a Metal target, run on the CPU."""

    name = "metal-shim"
    executable = MetalShimExecutable
