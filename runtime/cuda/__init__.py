"""The CUDA runtime: runs programs compiled for a CUDA target (h100, h200, a100, l4, t4).

CuPy is imported lazily, so this module imports everywhere. Until the CuPy runtime lands (NVRTC modules cached by
source hash, one device arena, CUDA-graph capture), loading a program says plainly what this machine lacks; the
generated CUDA is checked on the CPU through the host shim (runtime/cuda/host_shim/, runtime/cuda/shim.py).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Mapping

import numpy as np

from luminal.runtime.registry import RuntimeUnavailable


def missing() -> str | None:
    """What this machine lacks to run CUDA programs, or None when CuPy sees a device."""
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x, as the driver's CUDA allows)"
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no libcuda: CuPy raises its own error types
        return f"no CUDA device: CuPy could not reach the driver ({type(e).__name__}: {e})"
    return None if count > 0 else "no CUDA device: CuPy found none"


class CudaRuntime:
    """`CudaRuntime().load(program)`: raises RuntimeUnavailable naming what is missing."""

    name = "cuda"

    def load(self, program: Any, weights: Mapping[str, np.ndarray] | None = None):
        reason = missing()
        target = getattr(program, "target", "cuda")
        if reason is not None:
            raise RuntimeUnavailable(f"cannot run the {target} program here: {reason}")
        raise RuntimeUnavailable(
            f"cannot run the {target} program here: the CuPy runtime (NVRTC modules, device arena, CUDA graphs) "
            "is not built yet; its CUDA source is in program.source"
        )
