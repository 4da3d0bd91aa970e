"""Generated GEMM kernels or cuBLAS calls: the candidate programs a CUDA compile ranks.

A candidate's kernel program runs every GEMM as a generated kernel. Beside it, its "+cublas" variant gives to
cuBLAS each GEMM cuBLAS can compute alone (compiler/cuda/library_gemm.py) whose roofline estimate as a library
call (compiler/analysis/cost.py, the target's `library_gemm_efficiency` and `library_call_s`) is below the generated
kernel's. Both are ranked like any candidates: by the roofline, or, with profile=True, by their timings on the
device. The `gemm_library` compile option overrides: "never" keeps generated kernels only, "always" gives cuBLAS
every GEMM it can compute (how the bench and the tests get one whatever its size).
"""

from __future__ import annotations

from luminal.compiler.analysis.cost import estimate
from luminal.compiler.analysis.targets import get_target
from luminal.compiler.cuda.library_gemm import CUBLAS, eligible, mark
from luminal.compiler.kernels import ir

MODES = ("auto", "never", "always")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"gemm_library must be one of {MODES}, not {mode!r}")
    return mode


def library_variant(p: ir.KernelProgram, target: str, mode: str = "auto") -> ir.KernelProgram | None:
    """`p` with its GEMMs given to cuBLAS as `mode` says, or None when that gives none (or `target` has no
    library GEMMs)."""
    t = get_target(target)
    if check_mode(mode) == "never" or not t.library_gemm_efficiency:
        return None
    chosen = set()
    for k in eligible(p):
        library, generated = (estimate(k, p.buffers, t, library=lib) for lib in (CUBLAS, None))
        if mode == "always" or library.seconds < generated.seconds:
            chosen.add(k.name)
    return mark(p, chosen) if chosen else None
