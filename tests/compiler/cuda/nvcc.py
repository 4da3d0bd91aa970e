"""This machine's nvcc as a checker of generated CUDA: compile a source for sm_80 and sm_90 and read what ptxas
reports for each kernel (registers, spills, shared memory).

What ptxas reported is kept in the compile cache (LUMINAL_CACHE_DIR), as NVRTC's reports are: keyed by the source,
the architectures, the flags and the versions of nvcc and of the host compiler it preprocesses with, it is what
compiling again would report. An nvcc compile is ~1.5 s of CPU (its cicc parses the CUDA runtime's host headers);
the tests ask for ~40 of them."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from luminal.runtime.cuda import nvrtc
from luminal.runtime.cuda.ptxas_report import KernelUsage as Usage
from luminal.runtime.cuda.ptxas_report import parse

ARCHS = ("80", "90")
# --fmad=false as the runtime compiles (every op rounds as the reference does); 177 is an unused prelude helper,
# 1046 a float literal written with more digits than float keeps (it rounds, as in C).
FLAGS = ["--fmad=false", "--resource-usage", "-diag-suppress", "177,1046"]


def available() -> bool:
    return shutil.which("nvcc") is not None


def compile_cuda(source: str, archs: tuple[str, ...] = ARCHS) -> list[Usage]:
    """Compile `source` to a fat binary for `archs`; what ptxas reports per kernel and architecture."""
    key = hashlib.sha256("\0".join([toolchain(), source, *archs, *FLAGS]).encode()).hexdigest()[:32]
    kept = cache_dir() / f"{key}.ptxas.txt"
    if kept.exists():
        return parse(kept.read_text())
    report = _report(source, archs)
    staged = kept.with_suffix(f".{os.getpid()}.tmp")  # written whole, then renamed: concurrent workers race safely
    staged.write_text(report)
    os.replace(staged, kept)
    return parse(report)


@lru_cache(maxsize=1)
def toolchain() -> str:
    """nvcc's version and that of the host compiler it preprocesses the source with (its headers are read)."""
    versions = [subprocess.run([tool, "--version"], capture_output=True, text=True).stdout for tool in ("nvcc", "g++")]
    return "\0".join([shutil.which("nvcc") or "", *versions])


def cache_dir() -> Path:
    """The reports' folder, beside NVRTC's CUBINs in the compile cache."""
    path = nvrtc.cache_dir().parent / "nvcc-ptxas"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _report(source: str, archs: tuple[str, ...]) -> str:
    """What ptxas reports when nvcc compiles `source` for `archs` (AssertionError with nvcc's errors if it fails)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "program.cu"
        path.write_text(source)
        codes = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
        cmd = ["nvcc", "-fatbin", *codes, *FLAGS, str(path), "-o", str(Path(tmp) / "program.fatbin")]
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise AssertionError(f"nvcc failed:\n{done.stderr[-4000:]}")
    return done.stdout + done.stderr


def ptx(source: str, arch: str = "90") -> str:
    """The PTX nvcc makes of `source` for sm_`arch`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "program.cu"
        path.write_text(source)
        out = Path(tmp) / "program.ptx"
        flags = [f for f in FLAGS if f != "--resource-usage"]
        done = subprocess.run(
            ["nvcc", "-ptx", f"-arch=sm_{arch}", *flags, str(path), "-o", str(out)], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise AssertionError(f"nvcc failed:\n{done.stderr[-4000:]}")
        return out.read_text()


def wide_divisions(source: str, arch: str = "90") -> dict[str, int]:
    """Per kernel, the 64-bit integer divisions and remainders in its PTX: a GPU has no integer divider, so
    each is a subroutine of dozens of instructions (what index arithmetic by a launch-time size costs)."""
    counts: dict[str, int] = {}
    kernel = None
    for line in ptx(source, arch).splitlines():
        entry = re.match(r"\s*(?:\.visible\s+)?\.entry\s+(\w+)\(", line)
        if entry:
            kernel = entry.group(1)
            counts[kernel] = 0
        elif kernel is not None and re.match(r"\s*(div|rem)\.[su]64\b", line):
            counts[kernel] += 1
    return counts
