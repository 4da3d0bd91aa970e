"""cuBLAS's C API through ctypes: the five calls the runtime's cuBLAS steps make (runtime/cuda/cublas.py).

Not CuPy's `cupy.cuda.cublas`: each of its GEMM wrappers first binds the handle to CuPy's current stream again
(which, in cuBLAS, also resets the handle's workspace to cuBLAS's own pool), and that `setStream` refuses a stream
that is capturing (CuPy 14, cupy_backends/cuda/libs/cublas.pyx). The steps are issued on the executable's own
stream while it captures the whole forward pass into one CUDA graph, which cuBLAS itself allows once the handle
has a workspace of its own, so that it allocates nothing during the capture.

The library is the one CuPy's CUDA 13 wheels load: the `nvidia-cublas` wheel's, else a CUDA toolkit's, else the
loader's. The names below are cuBLAS's without their `cublas` prefix and `_v2` suffix.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

from luminal.runtime.cuda import library_search
from luminal.runtime.registry import RuntimeUnavailable

_p, _i, _ll, _size = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t
# cublasStatus_t values (cublas_api.h), for the message of a failed call.
STATUS = {
    1: "CUBLAS_STATUS_NOT_INITIALIZED",
    3: "CUBLAS_STATUS_ALLOC_FAILED",
    7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH",
    11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR",
    15: "CUBLAS_STATUS_NOT_SUPPORTED",
    16: "CUBLAS_STATUS_LICENSE_ERROR",
}
# symbol -> argument types; every one returns a cublasStatus_t.
SIGNATURES = {
    "cublasCreate_v2": (ctypes.POINTER(_p),),
    "cublasDestroy_v2": (_p,),
    "cublasSetStream_v2": (_p, _p),
    "cublasSetWorkspace_v2": (_p, _p, _size),
    "cublasGemmStridedBatchedEx": (
        _p, _i, _i, _i, _i, _i,  # handle, transa, transb, m, n, k
        _p, _p, _i, _i, _ll,  # alpha, A, Atype, lda, strideA
        _p, _i, _i, _ll,  # B, Btype, ldb, strideB
        _p, _p, _i, _i, _ll,  # beta, C, Ctype, ldc, strideC
        _i, _i, _i,  # batchCount, computeType, algo
    ),
}  # fmt: skip


class CublasError(RuntimeError):
    """A cuBLAS call returned an error status."""


def _candidates() -> list[str]:
    return library_search.candidates("cublas", ("nvidia/cu13/lib", "nvidia/cublas/lib"))


@lru_cache(maxsize=1)
def load() -> ctypes.CDLL:
    """The loaded libcublas, its functions typed (raises RuntimeUnavailable naming where it looked)."""
    tried = _candidates()
    lib = library_search.first_loadable(tried)
    if lib is not None:
        for symbol, argtypes in SIGNATURES.items():
            function = getattr(lib, symbol)
            function.argtypes, function.restype = argtypes, ctypes.c_int
        return lib
    raise RuntimeUnavailable(library_search.not_found("cublas", "nvidia-cublas>=13,<14", tried))


def _check(status: int, call: str) -> None:
    if status != 0:
        raise CublasError(f"{call} failed: {STATUS.get(status, f'cublasStatus_t {status}')}")


def create() -> int:
    handle = _p()
    _check(load().cublasCreate_v2(ctypes.byref(handle)), "cublasCreate")
    return handle.value


def destroy(handle: int) -> None:
    _check(load().cublasDestroy_v2(handle), "cublasDestroy")


def setStream(handle: int, stream: int) -> None:  # noqa: N802 - cuBLAS's name
    """Bind `handle` to `stream`. cuBLAS also resets the handle's workspace to its own pool here: set it after."""
    _check(load().cublasSetStream_v2(handle, stream), "cublasSetStream")


def setWorkspace(handle: int, pointer: int, size: int) -> None:  # noqa: N802 - cuBLAS's name
    _check(load().cublasSetWorkspace_v2(handle, pointer, size), "cublasSetWorkspace")


def gemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,  # noqa: N802,N803
                         beta, C, Ctype, ldc, strideC, batchCount, computeType, algo) -> None:  # noqa: N803 # fmt: skip
    """One strided batched GEMM on the handle's stream, alpha and beta read from host memory (their addresses)."""
    status = load().cublasGemmStridedBatchedEx(
        handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
        beta, C, Ctype, ldc, strideC, batchCount, computeType, algo,
    )  # fmt: skip
    _check(status, "cublasGemmStridedBatchedEx")
