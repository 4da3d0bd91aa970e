"""The host shims' builds read their stand-in header precompiled (runtime/precompiled_header.py): each program's
own g++ command, run again with -H, shows the precompiled header in use ('!'), not the header parsed again.
GCC falls back to the header itself without a word when the flags of the two builds differ, so only this check
notices a flag added to one and not the other."""

from __future__ import annotations

import subprocess

import pytest

from luminal.runtime.cuda import shim as cuda_shim
from luminal.runtime.metal import shim as metal_shim

pytestmark = pytest.mark.needs("g++")

CUDA_SOURCE = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n'
MSL_SOURCE = "#include <metal_stdlib>\nusing namespace metal;\nkernel void k(device float* x) { x[0] = 1.0f; }\n"


def _commands(monkeypatch, module) -> list[list[str]]:
    """Every command `module`'s builds run, recorded as they run."""
    seen: list[list[str]] = []
    real = subprocess.run

    def run(cmd, *args, **kwargs):
        seen.append(list(cmd))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(module.subprocess, "run", run)
    return seen


def _program_builds(commands: list[list[str]]) -> list[list[str]]:
    """The commands that built a program's library: not the linker's probe (runtime/linker.py), which links a
    library of its own the first time a process builds one."""
    return [c for c in commands if "-shared" in c and c[c.index("-o") + 1].endswith("program.so")]


def _reads_precompiled(cmd: list[str], header: str, cwd=None) -> bool:
    out = cmd.index("-o")
    again = [*cmd[:out], "-H", "-o", "/dev/null", *cmd[out + 2 :]]
    done = subprocess.run(again, capture_output=True, text=True, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    first = done.stderr.splitlines()[0]  # -H lists each header read, the precompiled one marked '!'
    return first.startswith("! ") and first.endswith(f"{header}.gch")


@pytest.mark.parametrize("reversed_blocks", [False, True])
def test_cuda_shim_builds_read_the_precompiled_header(tmp_path, monkeypatch, reversed_blocks):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    commands = _commands(monkeypatch, cuda_shim)
    cuda_shim.build_library(CUDA_SOURCE, reversed_blocks=reversed_blocks)
    (build,) = _program_builds(commands)
    source = tmp_path / "program.cu"
    source.write_text(CUDA_SOURCE)
    build[-1] = str(source)  # the build's own source was in a folder since removed
    assert _reads_precompiled(build, "cuda_shim.h")


def test_metal_shim_builds_read_the_precompiled_header(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    commands = _commands(monkeypatch, metal_shim)
    metal_shim.build_library(MSL_SOURCE, "")
    (build,) = _program_builds(commands)
    source = tmp_path / "program.metal"
    source.write_text(metal_shim.as_cpp(MSL_SOURCE))
    build[-1] = str(source)
    assert _reads_precompiled(build, "metal_stdlib")
