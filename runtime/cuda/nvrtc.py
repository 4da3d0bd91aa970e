"""NVRTC through ctypes: a program's CUDA source to a CUBIN for one architecture, cached on disk.

No GPU and no CuPy are needed: NVRTC is a plain library (the `nvidia-cuda-nvrtc` wheel ships it, as does any CUDA
toolkit), so CI compiles every program it tests. A CUBIN (not PTX) is what we keep: SASS for the exact
architecture loads on any driver of the same CUDA major version, where PTX from a newer NVRTC would need a newer
driver to JIT it.

The cache key is the sha256 of (source, architecture, NVRTC version, options); entries are written atomically,
so concurrent workers compiling the same program never read a half-written file.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import sys
from functools import lru_cache
from pathlib import Path

from luminal.runtime.cuda import library_search
from luminal.runtime.cuda.ptxas_report import KernelUsage, parse

# --fmad=false: every op rounds as the reference interpreter does (the GEMM and attention kernels ask for their
# FMAs with fmaf); the same flag the nvcc tests compile with (tests/compiler/cuda/nvcc.py).
OPTIONS = ("--fmad=false", "-std=c++17")
VERBOSE_PTXAS = "-Xptxas=-v"
# NVRTC's automatic precompiled header: the first compile of a process keeps what it parsed of the includes (the
# CUDA headers and HOST_HEADERS; ~15 ms more) and later compiles with the same includes start from it: 238 compiles
# of 119 op-suite programs took 18-20 s of CPU instead of 20.5-22 s. The CUBIN is byte for byte the same
# (tests/runtime/cuda/test_nvrtc.py), so it stays out of the cache key. What would make the report differ is
# silenced: NVRTC's messages about the header, warning 629, which a compile for another architecture than the
# header was made for gives, and warning 630, which a source whose includes differ from the header's gives (a test
# worker that compiled other sources first: `make test` failed on it). NVRTC keeps the header in a temporary
# folder it removes when the process ends.
PRECOMPILED_HEADER = ("-pch", "--pch-messages=false", "--diag-suppress=629,630")
ELF_MAGIC = b"\x7fELF"
# The generated source includes the C headers nvcc finds on the host; NVRTC has no host headers, so these two are
# handed to it in memory. The math functions themselves are NVRTC built-ins.
HOST_HEADERS = {
    "math.h": "#pragma once\n#define INFINITY __int_as_float(0x7f800000)\n#define NAN __int_as_float(0x7fffffff)\n",
    "stdint.h": "#pragma once\n"
    "typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;\n"
    "typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;\n"
    "typedef unsigned long long uint64_t;\n"
    "#define INT8_MIN (-128)\n#define INT8_MAX 127\n#define UINT8_MAX 255\n"
    "#define INT16_MIN (-32768)\n#define INT16_MAX 32767\n#define UINT16_MAX 65535\n"
    "#define INT32_MIN (-2147483647 - 1)\n#define INT32_MAX 2147483647\n#define UINT32_MAX 4294967295u\n"
    "#define INT64_MIN (-9223372036854775807LL - 1)\n#define INT64_MAX 9223372036854775807LL\n"
    "#define UINT64_MAX 18446744073709551615ULL\n",
}


class NvrtcError(RuntimeError):
    """NVRTC is missing, or it rejected a source (the message carries NVRTC's log)."""


def _candidates() -> list[str]:
    """Where libnvrtc may be: the pip wheel, $CUDA_PATH, the usual toolkit folders (not its builtins library)."""
    found = library_search.candidates("nvrtc", ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"))
    return [path for path in found if "builtins" not in os.path.basename(path)]


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """The loaded libnvrtc (raises NvrtcError naming where it looked)."""
    tried = _candidates()
    lib = library_search.first_loadable(tried)
    if lib is not None:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        return lib
    raise NvrtcError(library_search.not_found("nvrtc", "nvidia-cuda-nvrtc>=13,<14", tried))


def _check(result: int, what: str) -> None:
    if result != 0:
        message = library().nvrtcGetErrorString(result).decode()
        raise NvrtcError(f"{what} failed: {message}")


def version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def version_text() -> str:
    return ".".join(map(str, version()))


def _strings(items) -> ctypes.Array:
    return (ctypes.c_char_p * max(len(items), 1))(*[s.encode() for s in items])


def _log(lib: ctypes.CDLL, program: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    _check(lib.nvrtcGetProgramLogSize(program, ctypes.byref(size)), "nvrtcGetProgramLogSize")
    log = ctypes.create_string_buffer(size.value)
    _check(lib.nvrtcGetProgramLog(program, log), "nvrtcGetProgramLog")
    return log.value.decode(errors="replace")


def compile_uncached(source: str, arch: str, options: tuple[str, ...] = OPTIONS, name: str = "program.cu") -> bytes:
    """The CUBIN of `source` for `arch` ("90" or "sm_90"); raises NvrtcError with NVRTC's log on an error."""
    return compile_with_report(source, arch, options, name)[0]


def compile_with_report(
    source: str, arch: str, options: tuple[str, ...] = OPTIONS, name: str = "program.cu"
) -> tuple[bytes, str]:
    """The CUBIN of `source` for `arch` and what ptxas reported about each kernel (ptxas_report.parse reads it)."""
    lib = library()
    program = ctypes.c_void_p()
    names, texts = list(HOST_HEADERS), list(HOST_HEADERS.values())
    created = lib.nvrtcCreateProgram(
        ctypes.byref(program), source.encode(), name.encode(), len(names), _strings(texts), _strings(names)
    )
    _check(created, "nvrtcCreateProgram")
    try:
        # ptxas's verbose report costs nothing measurable and is the only place NVRTC says a kernel spills.
        architecture = f"--gpu-architecture=sm_{arch.removeprefix('sm_')}"
        flags = (architecture, *options, VERBOSE_PTXAS, *PRECOMPILED_HEADER, *include_flags())
        result = lib.nvrtcCompileProgram(program, len(flags), _strings(flags))
        if result != 0:
            status = lib.nvrtcGetErrorString(result).decode()
            raise NvrtcError(f"NVRTC could not compile {name} for sm_{arch.removeprefix('sm_')} ({status}):\n"
                             f"{_log(lib, program)[-8000:]}")  # fmt: skip
        size = ctypes.c_size_t()
        _check(lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        return cubin.raw, _log(lib, program)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


@lru_cache(maxsize=1)
def include_flags() -> tuple[str, ...]:
    """-I flags for the CUDA headers the source includes (cuda_fp16.h, cuda_bf16.h): the headers this NVRTC
    bundles, extracted once into the cache (NVRTC 13.1+), else the first folder `header_folders` finds."""
    lib = library()
    if hasattr(lib, "nvrtcInstallBundledHeaders"):
        path = cache_dir().parent / f"nvrtc-headers-{version_text()}"
        error = ctypes.c_char_p()
        # flags 0: skip when this version's headers are already there; NVRTC locks against concurrent installs.
        if lib.nvrtcInstallBundledHeaders(str(path).encode(), 0, ctypes.byref(error)) != 0:
            raise NvrtcError(f"NVRTC could not extract its bundled headers into {path}: {error.value}")
        return (f"-I{path}",)
    return tuple(f"-I{folder}" for folder in header_folders()[:1])


def header_folders() -> list[str]:
    """Folders that hold cuda_fp16.h, searched as CuPy searches: cuda.pathfinder where it is installed (NVIDIA's
    wheels, conda, CUDA_PATH / CUDA_HOME), then the toolkit the environment names, the NVIDIA wheels on sys.path
    (nvidia/cu13/include, nvidia/cuda_runtime/include) and /usr/local/cuda*."""
    found: list[str | None] = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found.append(find_nvidia_header_directory("cudart"))
    except Exception:  # not installed, or too old to know the CUDA runtime's headers
        pass
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME")]
    found += [os.path.join(r, "include") for r in roots if r]
    for entry in sys.path:
        found += sorted(glob.glob(os.path.join(entry or ".", "nvidia", "*", "include")))
    found += [os.path.join(r, "include") for r in sorted(glob.glob("/usr/local/cuda*"))]
    with_headers = [f for f in found if f and os.path.isfile(os.path.join(f, "cuda_fp16.h"))]
    return list(dict.fromkeys(with_headers))


def cache_dir() -> Path:
    root = os.environ.get("LUMINAL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "luminal")
    path = Path(root) / "cuda-cubin"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_path(source: str, arch: str, options: tuple[str, ...] = OPTIONS) -> Path:
    """Where the CUBIN of (source, arch, this NVRTC, options) lives in the cache."""
    arch = arch.removeprefix("sm_")
    key = "\0".join([source, arch, version_text(), *options])
    return cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.sm_{arch}.cubin"


def compile_cubin(source: str, arch: str, options: tuple[str, ...] = OPTIONS) -> bytes:
    """The CUBIN of `source` for `arch`, compiled once per (source, arch, NVRTC version, options)."""
    path = cache_path(source, arch, options)
    if path.exists():
        return path.read_bytes()
    return _compile_into_cache(source, arch, options)[0]


def kernel_usage(source: str, arch: str, options: tuple[str, ...] = OPTIONS) -> list[KernelUsage]:
    """What ptxas reported for each kernel of `source` on `arch` (registers, spills, shared memory), kept in the
    cache beside the CUBIN."""
    report = cache_path(source, arch, options).with_suffix(".ptxas.txt")
    if report.exists():
        return parse(report.read_text())
    return parse(_compile_into_cache(source, arch, options)[1])


def _compile_into_cache(source: str, arch: str, options: tuple[str, ...]) -> tuple[bytes, str]:
    path = cache_path(source, arch, options)
    cubin, report = compile_with_report(source, arch, options)
    # Each file written whole under a private name, then renamed (atomic): a concurrent compile of the same key
    # writes the same bytes. The report first, so a CUBIN in the cache has its report beside it.
    for target, data in ((path.with_suffix(".ptxas.txt"), report.encode()), (path, cubin)):
        staged = target.with_suffix(f".{os.getpid()}.tmp")
        staged.write_bytes(data)
        os.replace(staged, target)
    return cubin, report
