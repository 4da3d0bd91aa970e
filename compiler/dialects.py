"""Dialects of the one C-like renderer (compiler/render.py): what truly differs between C and CUDA C++.

A dialect supplies the storage type of each dtype (C's _Float16 and raw bf16 bits against CUDA's __half and
__nv_bfloat16), how a stored half value is read and written, the math functions' names, the pointer-alias
qualifier, whether loops carry vectorisation pragmas, and for GPU dialects the kernel qualifier, thread and block
indices, barrier and shared-memory qualifier. Everything else (expressions, guards, gathers, selects, casts,
reductions, literals) is rendered once. Compute types are the same everywhere: half types compute in float and
round to their type after every op, as the reference interpreter's numpy does.
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.integers import CTYPE

# Integers compute and are stored as their own C type (int8_t .. uint64_t); bool as a 0/1 byte.
COMPUTE = {dt.float32: "float", dt.float16: "float", dt.bfloat16: "float", **CTYPE, dt.bool_: "uint8_t"}  # fmt: skip


class CDialect:
    """C11 for the CPU target (gcc/clang, OpenMP)."""

    name = "c"
    storage = {dt.float32: "float", dt.float16: "_Float16", dt.bfloat16: "uint16_t", **CTYPE, dt.bool_: "uint8_t"}
    restrict = "restrict"
    # OpenMP SIMD pragmas on reductions whose body is one expression; without them a float sum is sequential
    # and accumulates in `serial_sum_type` (double on a CPU, where it costs little).
    vector_pragmas = True
    serial_sum_type = "double"
    math = {"Log2": "log2f", "Exp2": "exp2f", "Sin": "sinf", "Sqrt": "sqrtf", "Mod": "fmodf", "Trunc": "truncf"}

    def load(self, ptr: str, index: str, dtype: dt.DType) -> str:
        raw = f"{ptr}[{index}]"
        if dtype == dt.bfloat16:
            return f"lm_bf16_load({raw})"
        return f"(float){raw}" if dtype == dt.float16 else raw

    def store(self, value: str, dtype: dt.DType) -> str:
        if dtype == dt.bfloat16:
            return f"lm_bf16_store({value})"
        return f"({self.storage[dtype]})({value})"

    def round(self, expr: str, dtype: dt.DType) -> str:
        """Round a float compute value to a half type (lm_round_* are each dialect's prelude helpers)."""
        if dtype == dt.float16:
            return f"lm_round_f16({expr})"
        if dtype == dt.bfloat16:
            return f"lm_round_bf16({expr})"
        return expr


class CudaDialect(CDialect):
    """CUDA C++ for NVIDIA GPUs (nvcc / NVRTC; the host shim compiles it as C++ too)."""

    name = "cuda"
    storage = {**CDialect.storage, dt.float16: "__half", dt.bfloat16: "__nv_bfloat16"}
    restrict = "__restrict__"
    vector_pragmas = False
    serial_sum_type = "float"  # double runs at 1/32 to 1/64 of the float rate on L4 and T4
    kernel = 'extern "C" __global__ void'
    device = "static __device__ inline"
    shared = "__shared__"
    barrier = "__syncthreads();"
    thread_index = "(int64_t)threadIdx.x"
    block_index = "(int64_t)blockIdx.x"
    block_size = "(int64_t)blockDim.x"

    def load(self, ptr: str, index: str, dtype: dt.DType) -> str:
        if dtype == dt.float16:
            return f"__half2float({ptr}[{index}])"
        if dtype == dt.bfloat16:
            return f"__bfloat162float({ptr}[{index}])"
        return f"{ptr}[{index}]"

    def store(self, value: str, dtype: dt.DType) -> str:
        if dtype == dt.float16:
            return f"__float2half_rn({value})"
        if dtype == dt.bfloat16:
            return f"__float2bfloat16_rn({value})"
        return f"({self.storage[dtype]})({value})"


C = CDialect()
CUDA = CudaDialect()
