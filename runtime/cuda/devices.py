"""The NVIDIA GPUs this machine has, each named by the compiler target its programs are compiled for.

Asked of CuPy first (the runtime that will run the programs; imported lazily), else of the driver through
`nvidia-smi`, so a worker host without CuPy still reports what it has (marked `cupy_sees=False`: the CUDA
runtime cannot use it until CuPy can). A machine with neither has no GPU: [].
A part the compiler has no target for (an L40S, a GH200) is kept with its driver name and target None, so a
platform can say what it found instead of hiding it.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from dataclasses import dataclass

from luminal.compiler.analysis.targets import TARGETS

NVIDIA_SMI_TIMEOUT_S = 10.0  # a wedged driver must not hang the provisioner's start
MIB = 2**20


@dataclass(frozen=True)
class Gpu:
    index: int  # the CUDA device ordinal (what CUDA_VISIBLE_DEVICES selects)
    name: str  # as the driver reports it, e.g. "NVIDIA H100 80GB HBM3"
    target: str | None  # the compiler target for it ("h100"); None: a part the compiler has no target for
    memory_bytes: int | None = None
    cupy_sees: bool = True  # False: only nvidia-smi reported it, so the CUDA runtime (CuPy) cannot run on it


def target_for_device_name(name: str) -> str | None:
    """The CUDA target a driver device name denotes: "NVIDIA A100-SXM4-80GB" -> "a100", "Tesla T4" -> "t4".

    The model must be a whole word of the name, so an L40S is not an L4, an A10G not an A100, a GH200 not an
    H200: each of those is a different chip, whose figures the target's roofline would misstate."""
    words = {w for w in re.split(r"[\s\-_/]+", name.upper()) if w}
    found = [t.name for t in TARGETS.values() if t.kind == "cuda" and t.name.upper() in words]
    return found[0] if len(found) == 1 else None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """GPUs from `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader` ("NVIDIA L4, 23034 MiB")."""
    gpus = []
    for line in (ln.strip() for ln in text.splitlines()):
        if not line:
            continue
        name, _, memory = line.rpartition(",")
        if not name:  # no memory column: the whole line is the name
            name, memory = memory, ""
        name = name.strip()
        amount = re.fullmatch(r"\s*(\d+)\s*MiB\s*", memory)
        memory = int(amount[1]) * MIB if amount else None
        gpus.append(Gpu(len(gpus), name, target_for_device_name(name), memory, cupy_sees=False))
    return gpus


def _from_cupy() -> list[Gpu] | None:
    """None when CuPy is missing or cannot reach a driver (the caller then asks nvidia-smi)."""
    if importlib.util.find_spec("cupy") is None:
        return None
    try:
        import cupy

        gpus = []
        for i in range(cupy.cuda.runtime.getDeviceCount()):
            props = cupy.cuda.runtime.getDeviceProperties(i)
            name = props["name"]
            name = name.decode() if isinstance(name, bytes) else str(name)
            gpus.append(Gpu(i, name, target_for_device_name(name), int(props["totalGlobalMem"])))
        return gpus
    except Exception:  # no driver or no libcuda: CuPy raises its own error types
        return None


def _from_nvidia_smi() -> list[Gpu]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    query = [smi, "--query-gpu=name,memory.total", "--format=csv,noheader"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(done.stdout) if done.returncode == 0 else []


def local_gpus() -> list[Gpu]:
    """This machine's NVIDIA GPUs in device order; [] where there are none (or no driver to ask)."""
    found = _from_cupy()
    return found if found is not None else _from_nvidia_smi()
