"""The runtime protocol and the registry that finds a runtime by its target's kind (cpu, cuda, metal).

A compiled program names its target; the target's kind (compiler/analysis/targets.py) names the runtime that runs it.
Runtimes are found by import path, so nothing heavy (CuPy, PyObjC, a C compiler probe) is imported until a
program of that kind is loaded, and the compiler never imports a runtime at module import.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping, Protocol

import numpy as np


class RuntimeUnavailable(RuntimeError):
    """This machine cannot run programs of a target kind; the message names what is missing (a device, a package)."""


class Executable(Protocol):
    def run(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]: ...


class Runtime(Protocol):
    name: str

    def load(self, program: Any, weights: Mapping[str, np.ndarray] | None = None) -> Executable: ...


# kind -> "module:class"; a module imported only when a program of that kind is loaded.
RUNTIMES: dict[str, str] = {
    "reference": "luminal.runtime.reference:ReferenceRuntime",
    "cpu": "luminal.runtime.cpu:CpuRuntime",
    "cuda": "luminal.runtime.cuda:CudaRuntime",
    "metal": "luminal.runtime.metal:MetalRuntime",
}


def runtime_for(kind: str) -> Runtime:
    """A runtime for programs of target kind `kind` (raises RuntimeUnavailable where this machine has none)."""
    try:
        module, cls = RUNTIMES[kind].split(":")
    except KeyError:
        raise RuntimeUnavailable(f"no runtime for target kind {kind!r}; known kinds: {', '.join(RUNTIMES)}") from None
    return getattr(importlib.import_module(module), cls)()
