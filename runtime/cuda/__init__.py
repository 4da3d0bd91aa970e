"""The CUDA runtime: runs programs compiled for a CUDA target (h100, h200, a100, l4, t4) through CuPy.

`CudaRuntime().load(program)` compiles the program's CUDA source with NVRTC for the device's architecture (cached
on disk), uploads the weights once and returns a CudaExecutable (runtime/cuda/executable.py) that issues each
forward pass as one CUDA graph launch per shape bucket. CuPy is imported only when a program is loaded, so this
package imports everywhere; where CuPy or a device is missing, loading raises RuntimeUnavailable naming what is.
The generated CUDA is also checked on the CPU through the host shim (runtime/cuda/host_shim/, shim.py).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Mapping

import numpy as np

from luminal.runtime.cuda import nvrtc
from luminal.runtime.reference import bound_weights
from luminal.runtime.registry import RuntimeUnavailable


def missing() -> str | None:
    """What this machine lacks to run CUDA programs (CuPy, a device, NVRTC), or None when it has all three."""
    if importlib.util.find_spec("cupy") is None:
        return (
            "CuPy is not installed (pip install 'luminal-cloud[cuda]': cupy-cuda13x, NVRTC and cuBLAS; "
            "'luminal-cloud[cuda12]' for a CUDA 12 driver)"
        )
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no libcuda: CuPy raises its own error types
        return f"no CUDA device: CuPy could not reach the driver ({type(e).__name__}: {e})"
    if count == 0:
        return "no CUDA device: CuPy found none"
    try:  # programs are compiled here, for this device's architecture
        nvrtc.library()
    except nvrtc.NvrtcError as e:
        return str(e)
    return None


class CudaRuntime:
    """`CudaRuntime().load(program, weights=None, graphs=True) -> CudaExecutable`, or RuntimeUnavailable."""

    name = "cuda"

    def load(self, program: Any, weights: Mapping[str, np.ndarray] | None = None, *, graphs: bool = True,
             tf32: bool = False, debug: bool | None = None):  # fmt: skip
        """`graphs=False` launches every kernel one by one instead of one captured graph per shape bucket (the
        default for `run`; each run can still choose with `run(..., graph=...)`); `tf32=True` lets the cuBLAS
        steps round float32 operands to TF32; `debug=True` (default: LUMINAL_CUDA_SYNC=1) waits for each kernel
        and names the one that faulted."""
        reason = missing()
        if reason is not None:
            raise RuntimeUnavailable(f"cannot run the {getattr(program, 'target', 'cuda')} program here: {reason}")
        import cupy

        from luminal.runtime.cuda.executable import CudaExecutable

        graph = program.graph
        weights = bound_weights(graph, weights)
        return CudaExecutable(cupy, graph, program.kernels, program.source, weights, plan=program.plan,
                              graphs=graphs, tf32=tf32, debug=debug)  # fmt: skip
