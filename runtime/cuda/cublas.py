"""The launch plan's "cublas" steps (compiler/cuda/library_gemm.py) issued through cuBLAS's C API
(runtime/cuda/cublas_library.py: CuPy's own bindings rebind the stream at every call and refuse a capture).

One cuBLAS handle per executable, bound once to the executable's stream, so a step issued while that stream
captures is recorded into the CUDA graph like a kernel; then given its own workspace (binding a stream resets the
workspace to cuBLAS's pool), so cuBLAS allocates nothing during a capture.
Each step is one cublasGemmStridedBatchedEx: alpha 1 and beta 0 read from host memory when issued, products
summed in fp32 (CUBLAS_COMPUTE_32F; float32 operands use TF32 tensor cores only when the load asks, tf32=True),
the output written at its planned place in the arena. `cp` is the cupy module, passed in: nothing here imports
CuPy.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from luminal import dtypes as dt
from luminal.compiler.storage.run_plan import LibraryGemm, Matrix
from luminal.runtime.cuda import cublas_library

OP_N, OP_T = 0, 1  # cublasOperation_t
DATA_TYPE = {dt.float32: 0, dt.float16: 2, dt.bfloat16: 14}  # cudaDataType_t (library_types.h)
COMPUTE_32F, COMPUTE_32F_FAST_TF32 = 68, 77  # cublasComputeType_t
GEMM_DEFAULT = -1  # cublasGemmAlgo_t: cuBLAS's heuristics choose the kernel
WORKSPACE = 32 * 2**20  # bytes: what NVIDIA's cuBLAS documentation recommends for Hopper


def evaluate(call: LibraryGemm, env: Mapping[str, int]) -> tuple[int, int, int]:
    """(m, n, batch) at dims `env`: the extents that may be symbolic (strides, offsets and k never are)."""
    return tuple(int(e.evaluate(dict(env))) for e in (call.m, call.n, call.batch))


class CublasSteps:
    def __init__(self, cp: Any, stream: Any, *, tf32: bool = False):
        self.cublas, self.stream, self.tf32 = cublas_library, stream, tf32
        self.handle = self.cublas.create()
        self.cublas.setStream(self.handle, stream.ptr)
        self.workspace = cp.cuda.alloc(WORKSPACE)
        self.cublas.setWorkspace(self.handle, self.workspace.ptr, WORKSPACE)
        self.scalars = np.array([1.0, 0.0], np.float32)  # alpha, beta: read on the host when a step is issued

    def issue(self, call: LibraryGemm, pointers: Mapping[str, Any], env: Mapping[str, int]) -> None:
        """The step at dims `env`, its matrices at `pointers` (buffer -> cupy MemoryPointer), on the stream."""
        m, n, batch = evaluate(call, env)

        def at(x: Matrix) -> int:
            return pointers[x.buffer].ptr + x.offset * x.dtype.itemsize

        a, b, c = call.a, call.b, call.c
        compute = COMPUTE_32F_FAST_TF32 if self.tf32 and a.dtype == dt.float32 else COMPUTE_32F
        alpha, beta = self.scalars.ctypes.data, self.scalars.ctypes.data + self.scalars.itemsize
        self.cublas.gemmStridedBatchedEx(
            self.handle, OP_T if a.transpose else OP_N, OP_T if b.transpose else OP_N, m, n, call.k,
            alpha, at(a), DATA_TYPE[a.dtype], a.ld, a.batch_stride,
            at(b), DATA_TYPE[b.dtype], b.ld, b.batch_stride,
            beta, at(c), DATA_TYPE[c.dtype], c.ld, c.batch_stride,
            batch, compute, GEMM_DEFAULT,
        )  # fmt: skip

    def close(self) -> None:
        if self.handle is not None:
            self.cublas.destroy(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit CuPy may be gone first: the driver frees the handle then
            pass
