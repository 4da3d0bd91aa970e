"""The backends: one folder per target kind (cpu/, cuda/, metal/), each exporting its passes and its generator
through its `backend.py`, which the pipeline (program.py) looks up here by the target's kind.

A backend module defines, by convention (tests/compiler/test_backend_layout.py holds it):
- `fuse(kernels, target)`: its fusion after the single-consumer policy, before indices are folded;
- `passes(kernels, donated, target, activation_dtype)`: its passes on each candidate's fused program;
- `variants(name, kernels, target, gemm_library)`: the candidate's programs to rank, each as it will ship (CUDA
  adds cuBLAS GEMMs, the GPU backends merged sibling GEMMs): nothing rewrites the chosen one afterwards;
- `program_source(kernels)`: the whole generated source;
- `launched_together(kernels)`: the kernel names of each launch that runs several, for the memory plan;
- `run_plan(kernels)`: what its runtime reads besides the IR and the source (compiler/storage/run_plan.py).
A backend is imported when first asked for: a CPU compile never imports the GPU generators.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from luminal.compiler.analysis.targets import TARGETS, get_target
from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import RunPlan

KINDS = ("cpu", "cuda", "metal")
COMPILED_TARGETS = tuple(name for name, t in TARGETS.items() if t.kind in KINDS)  # the targets with a backend
INTERFACE = ("fuse", "passes", "variants", "program_source", "launched_together", "run_plan")


def backend_for(target: str) -> ModuleType:
    """The backend module of `target` (a target name)."""
    kind = get_target(target).kind
    if kind not in KINDS:
        raise ValueError(f"target {target!r}: no code generator for {kind} targets yet")
    return importlib.import_module(f"luminal.compiler.{kind}.backend")


def program_source(kernels: ir.KernelProgram, target: str) -> str:
    """The generated source of `kernels` for `target` (a target name)."""
    return backend_for(target).program_source(kernels)


def run_plan(kernels: ir.KernelProgram, target: str) -> RunPlan:
    """The run plan of `kernels` for `target` (a target name): what its runtime reads instead of planning."""
    return backend_for(target).run_plan(kernels)
