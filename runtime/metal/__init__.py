"""The Metal runtime: runs programs compiled for an Apple target (m1, m2, m3, m4) on an Apple GPU through PyObjC.

`MetalRuntime().load(program)` compiles the program's MSL once with `newLibraryWithSource:options:error:`, builds a
compute pipeline per kernel, keeps the weights resident in MTLBuffers and returns a MetalExecutable
(runtime/metal/executable.py) that encodes each whole forward pass into one command buffer. PyObjC's Metal
framework is imported only when a program is loaded, so this package imports everywhere; elsewhere, loading raises
RuntimeUnavailable naming what is missing (macOS, PyObjC's Metal bindings, a Metal device). The generated MSL is
also checked and run on the CPU through the stand-in header (runtime/metal/host_shim/, shim.py).
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from typing import Any, Mapping

import numpy as np

from luminal.runtime.reference import bound_weights
from luminal.runtime.registry import RuntimeUnavailable

INSTALL = "pip install 'luminal-cloud[metal]' (pyobjc-framework-Metal)"


def missing() -> str | None:
    """What this machine lacks to run Metal programs (macOS, PyObjC's Metal bindings, a device), or None."""
    if sys.platform != "darwin":
        return f"Metal needs macOS and an Apple GPU; this is {platform.system() or sys.platform}"
    if importlib.util.find_spec("Metal") is None:
        return f"PyObjC's Metal framework bindings are not installed ({INSTALL})"
    import Metal

    if Metal.MTLCreateSystemDefaultDevice() is None:
        return "no Metal device: MTLCreateSystemDefaultDevice() returned none"
    return None


class MetalRuntime:
    """`MetalRuntime().load(program, weights=None) -> MetalExecutable`, or RuntimeUnavailable."""

    name = "metal"

    def load(self, program: Any, weights: Mapping[str, np.ndarray] | None = None, *, api: Any = None):
        """`api` stands in for PyObjC's `Metal` module (tests pass a fake); by default the real one is imported,
        where this machine has it."""
        if api is None:
            reason = missing()
            if reason is not None:
                raise RuntimeUnavailable(f"cannot run the {getattr(program, 'target', 'metal')} program here: {reason}")
            import Metal as api
        from luminal.runtime.metal.executable import MetalExecutable

        graph = program.graph
        weights = bound_weights(graph, weights)
        return MetalExecutable(api, graph, program.kernels, program.source, weights, plan=program.plan)
