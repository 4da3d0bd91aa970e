"""Dialects of the one C-like renderer (compiler/renderer/render.py): what truly differs between C, CUDA C++ and MSL.

A dialect supplies the storage type of each dtype (C's _Float16 and raw bf16 bits against CUDA's __half and
__nv_bfloat16), how a stored half value is read and written, the math functions' names, the pointer-alias
qualifier, whether loops carry vectorisation pragmas, and for GPU dialects the kernel qualifier, thread and block
indices, barrier and shared-memory qualifier. Everything else (expressions, guards, gathers, selects, casts,
reductions, literals) is rendered once. Compute types are the same everywhere: half types compute in float and
round to their type after every op, as the reference interpreter's numpy does; float64 computes in double
(float64.py). MSL has no double, so a float64 program for Metal is refused by `lacks`.
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.renderer import float64
from luminal.compiler.renderer.integers import CTYPE

# Integers compute and are stored as their own C type (int8_t .. uint64_t); bool as a 0/1 byte.
COMPUTE = {dt.float32: "float", dt.float16: "float", dt.bfloat16: "float", dt.float64: "double", **CTYPE,
           dt.bool_: "uint8_t"}  # fmt: skip


class CDialect:
    """C11 for the CPU target (gcc/clang, OpenMP)."""

    name = "c"
    storage = {dt.float32: "float", dt.float16: "_Float16", dt.bfloat16: "uint16_t", dt.float64: "double", **CTYPE,
               dt.bool_: "uint8_t"}  # fmt: skip
    restrict = "restrict"
    # OpenMP SIMD pragmas on reductions whose body is one expression; without them a float sum is sequential
    # and accumulates in `serial_sum_type` (double on a CPU, where it costs little).
    vector_pragmas = True
    serial_sum_type = "double"
    math = {"Log2": "log2f", "Exp2": "exp2f", "Sin": "sinf", "Sqrt": "sqrtf", "Mod": "fmodf", "Trunc": "truncf"}

    def function(self, op: str, dtype: dt.DType) -> str:
        """The math function computing `op` on a value of `dtype` (float64 calls the double versions)."""
        return float64.MATH[op] if dtype == dt.float64 else self.math[op]

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


class MetalDialect(CDialect):
    """Metal Shading Language 3.1 for Apple GPUs (compiled at load by `newLibraryWithSource:`, runtime/metal/).

    Kernels are `kernel void` functions whose buffers are `device` (or `constant`) pointer arguments bound by
    `[[buffer(n)]]`; the thread and threadgroup indices are arguments too, marked by attributes, and named like
    CUDA's built-ins so that the kernel bodies the GPU generators share read the same. SIMD groups are 32 wide
    (every Apple GPU family), so a warp's folds are SIMD shuffles. What MSL lacks is in `lacks`, each with why:
    the Metal generator refuses a source that still spells one (compiler/metal/program.py).
    """

    name = "metal"
    storage = {**CDialect.storage, dt.float16: "half", dt.bfloat16: "bfloat"}  # bfloat: MSL 3.1 (macOS 14)
    restrict = ""  # MSL has no restrict qualifier: device pointers may alias
    vector_pragmas = False
    serial_sum_type = "float"  # MSL has no double
    math = {"Log2": "metal::log2", "Exp2": "metal::exp2", "Sin": "metal::sin", "Sqrt": "metal::sqrt",
            "Mod": "metal::fmod", "Trunc": "metal::trunc"}  # fmt: skip
    kernel = "kernel void"
    device = "static inline"
    shared = "threadgroup"
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
    thread_index = "(int64_t)threadIdx.x"
    block_index = "(int64_t)blockIdx.x"
    block_size = "(int64_t)blockDim.x"
    simd_width = 32
    # A fold's butterfly: every lane ends with the whole result (simd_shuffle_down would leave it in lane 0).
    shuffle = "simd_shuffle_xor"
    # The kernel arguments that carry a dispatch's indices: name -> MSL attribute.
    indices = {"blockIdx": "threadgroup_position_in_grid", "threadIdx": "thread_position_in_threadgroup",
               "blockDim": "threads_per_threadgroup"}  # fmt: skip
    max_buffers = 31  # buffer argument table entries per kernel (Metal feature-set tables)
    lacks = {
        "double": "MSL has no 64-bit float type",
        "long long": "MSL spells its 64-bit integer long (int64_t); long long is reserved",
        "atomic_long": "MSL has no 64-bit atomics",
        "__int128": "MSL has no 128-bit integers",
        # CUDA spellings a shared kernel body could use that the MSL prelude does not define:
        "asm": "MSL has no inline assembly (CUDA's PTX, e.g. tensor-core mma)",
        "atomicAdd": "MSL's atomics are atomic_fetch_add_explicit on atomic types, not CUDA's atomicAdd",
        "__ldg": "MSL has no read-only cache load intrinsic",
    }

    def buffer(self, slot: int, dtype: dt.DType, name: str, written: bool) -> str:
        """One buffer argument: what a kernel writes is `device`, what it only reads `const device`."""
        space = "device" if written else "const device"
        return f"{space} {self.storage[dtype]}* {name} [[buffer({slot})]]"

    def load(self, ptr: str, index: str, dtype: dt.DType) -> str:
        raw = f"{ptr}[{index}]"
        return f"(float){raw}" if dtype in (dt.float16, dt.bfloat16) else raw

    def store(self, value: str, dtype: dt.DType) -> str:
        return f"({self.storage[dtype]})({value})"  # float -> half / bfloat rounds to nearest even in MSL


C = CDialect()
CUDA = CudaDialect()
METAL = MetalDialect()
