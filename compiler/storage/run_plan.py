"""The run plan: what a runtime needs of a compiled program besides its kernel IR and its source, as data.

Each backend works it out once, at compile time (its `run_plan`, compiler/backends.py), and the artifact stores
it (compiler/storage/plan_json.py), so a runtime reads these records instead of calling the compiler's planners
(DESIGN.md's data flow: compiler -> artifact -> runtime). It holds the launches of a run and of the load (a GPU
program's grids, blocks and pointer arguments; a CPU program has none: `lm_run` is one call), the kernels that
run together in one launch (the memory plan keeps what they touch live over it), the donated inputs a scatter
writes in place, the weights read only through packed panels, and the names of the buffer roles a runtime
allocates apart from the arena.

Data only: the runtimes import this module and the kernel IR's types, nothing else of the compiler's planning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from luminal import dtypes as dt
from luminal.symbolic import Expr

# Buffer roles a runtime allocates once per loaded program, beside the weights (the IR's other roles: input,
# weight, temp, output).
PACKED = "packed"  # a CPU GEMM's weight panels, filled by `lm_prepare` (compiler/cpu/prepack.py)
COUNTERS = "counters"  # flash decoding's arrival counters, zero at load (compiler/cuda/arrivals.py)
DERIVED = "derived"  # computed from the weights alone by the load's launches (compiler/kernels/derived_weights.py)


@dataclass(frozen=True)
class Matrix:
    """One of a library GEMM's three matrices: element (r, c) of the column-major view at
    buffer[offset + batch * batch_stride + r + c * ld], or, transposed, buffer[... + c + r * ld]."""

    buffer: str
    dtype: dt.DType  # what cuBLAS reads or writes there: float32, float16 or bfloat16
    transpose: bool
    ld: int
    offset: int  # elements
    batch_stride: int  # elements between consecutive batch elements (0: one matrix shared by every batch)


@dataclass(frozen=True)
class LibraryGemm:
    """c[m, n] = a[m, k] @ b[k, n] per batch element, column-major (cuBLAS's own names), fp32 sums
    (compiler/cuda/library_gemm.py decides which GEMMs and works out the arguments)."""

    a: Matrix
    b: Matrix
    c: Matrix
    m: Expr
    n: Expr
    k: int
    batch: Expr

    def describe(self) -> str:
        """The call as the program's source records it."""

        def matrix(x: Matrix, name: str) -> str:
            op = "T" if x.transpose else "N"
            return f"{name}={x.buffer}+{x.offset} op {op} ld {x.ld} stride {x.batch_stride} {x.dtype.name}"

        parts = [f"m={self.m} n={self.n} k={self.k} batch={self.batch}"]
        return "cublasGemmStridedBatchedEx(" + ", ".join([*parts, *(matrix(getattr(self, s), s) for s in "abc")]) + ")"


@dataclass(frozen=True)
class Launch:
    """One launch of a GPU program (compiler/gpu/launch.py describes the shapes): `grid` blocks of `block`
    threads, the kernel taking `buffers` (output first), then the dims block D and lm_status."""

    kernel: str  # the __global__ function's name
    shape: str  # "thread", "warp", "row", "gemv", "gemm", "attention", "attention_split", "combine", "copy", "scatter"
    grid: Expr  # blocks
    block: int  # threads per block
    buffers: tuple[str, ...]  # the pointer arguments, output first
    call: Any = None  # a "cublas" step's LibraryGemm; None for a kernel
    writes: int = 1  # the leading buffers the kernel writes (the rest it only reads)


@dataclass(frozen=True)
class RunPlan:
    """What a runtime does with a program beyond binding its inputs, weights and outputs (module docstring)."""

    launches: tuple[Launch, ...] = ()  # every run, in order (GPU programs)
    at_load: tuple[Launch, ...] = ()  # once, after the weights are bound: the kernels of derived buffers
    together: tuple[tuple[str, ...], ...] = ()  # the kernel names of each launch that runs several
    written_inputs: Mapping[str, str] = field(default_factory=dict)  # donated input buffer -> input name
    packed_only: tuple[str, ...] = ()  # weight buffers `lm_run` never reads: only their packed panels are

    def buffers_run_reads(self) -> set[str]:
        """The buffers some launch of a run names (a weight outside it is read only at load)."""
        return {buf for launch in self.launches for buf in launch.buffers}
