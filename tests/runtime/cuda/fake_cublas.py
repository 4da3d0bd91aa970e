"""A stand-in for cuBLAS's C API as the CUDA runtime calls it (runtime/cuda/cublas_library.py), computing with
numpy on the fake device's host memory: create/destroy, setStream, setWorkspace and gemmStridedBatchedEx with
cuBLAS's own column-major meaning. Its arguments are checked as cuBLAS checks them (a leading dimension too
small, an unknown type or compute type is CUBLAS_STATUS_INVALID_VALUE there, an error here), alpha and beta are
read from host memory when the call is issued, and the work runs on the stream the handle is bound to: recorded
while that stream captures, so a graph replays it. As in cuBLAS, binding a stream resets the handle's workspace
to cuBLAS's own pool, which allocates device memory when a GEMM needs it: so a GEMM captured on a handle without
a workspace of its own is an error here (on a device it breaks the capture)."""

from __future__ import annotations

import ctypes
import itertools

import ml_dtypes
import numpy as np

TYPES = {0: np.dtype(np.float32), 2: np.dtype(np.float16), 14: np.dtype(ml_dtypes.bfloat16)}
COMPUTE = {68, 77}  # CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32
_handles = itertools.count(1)
streams: dict[int, int] = {}  # handle -> the stream pointer it issues on
workspaces: dict[int, int] = {}  # handle -> its own workspace's pointer; 0: cuBLAS's pool
calls: list[dict] = []  # every call issued (not replayed): what the tests look at


class CublasError(RuntimeError):
    pass


def create() -> int:
    handle = next(_handles)
    streams[handle], workspaces[handle] = 0, 0
    return handle


def destroy(handle: int) -> None:
    streams.pop(handle)
    workspaces.pop(handle)


def setStream(handle: int, stream: int) -> None:  # noqa: N802 - cuBLAS's name
    streams[handle], workspaces[handle] = stream, 0


def setWorkspace(handle: int, ptr: int, size: int) -> None:  # noqa: N802 - cuBLAS's name
    if handle not in streams or size <= 0 or not ptr:
        raise CublasError("setWorkspace: a bad handle or workspace")
    workspaces[handle] = ptr


def _matrix(ptr: int, type_: int, rows: int, cols: int, ld: int, stride: int, batch: int, transpose: bool):
    """op(X) for every batch element, as float32 [batch, rows, cols]: X stored column-major (cols x rows when
    transposed) at ptr, ld apart, batches `stride` elements apart."""
    dtype = TYPES[type_]
    b, r, c = np.meshgrid(np.arange(batch), np.arange(rows), np.arange(cols), indexing="ij")
    at = b * stride + (c + r * ld if transpose else r + c * ld)
    count = int(at.max()) + 1 if at.size else 0
    flat = np.ctypeslib.as_array((ctypes.c_uint8 * max(count * dtype.itemsize, 1)).from_address(ptr))
    return flat[: count * dtype.itemsize].view(dtype)[at].astype(np.float32)


def gemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,  # noqa: N802,N803
                         beta, C, Ctype, ldc, strideC, batchCount, computeType, algo) -> None:  # noqa: N803 # fmt: skip
    if handle not in streams:
        raise CublasError("gemmStridedBatchedEx: not a live handle")
    from tests.runtime.cuda.fake_cupy import capturing  # here: fake_cupy imports this module

    if capturing(streams[handle]) and not workspaces[handle]:
        raise CublasError("gemmStridedBatchedEx captured on cuBLAS's own workspace pool, which allocates")
    a_rows = k if transa else m
    b_rows = n if transb else k
    checks = {
        "m, n, k, batchCount >= 0": min(m, n, k, batchCount) >= 0,
        "lda >= max(1, rows of stored A)": lda >= max(1, a_rows),
        "ldb >= max(1, rows of stored B)": ldb >= max(1, b_rows),
        "ldc >= max(1, m)": ldc >= max(1, m),
        "data types": {Atype, Btype, Ctype} <= set(TYPES) and Atype == Btype and Ctype in (Atype, 0),
        "compute type": computeType in COMPUTE,
    }
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        raise CublasError(f"CUBLAS_STATUS_INVALID_VALUE: {failed}")
    scale, shift = np.ctypeslib.as_array((ctypes.c_float * 1).from_address(alpha))[0], float(
        np.ctypeslib.as_array((ctypes.c_float * 1).from_address(beta))[0])  # fmt: skip
    calls.append(dict(transa=transa, transb=transb, m=m, n=n, k=k, batch=batchCount, compute=computeType))

    def run():
        x = _matrix(A, Atype, m, k, lda, strideA, batchCount, bool(transa))
        y = _matrix(B, Btype, k, n, ldb, strideB, batchCount, bool(transb))
        product = scale * np.matmul(x, y)
        assert shift == 0.0, "the runtime issues beta = 0: C is written, never read"
        out = TYPES[Ctype]
        b, i, j = np.meshgrid(np.arange(batchCount), np.arange(m), np.arange(n), indexing="ij")
        at = b * strideC + i + j * ldc
        if at.size:
            count = int(at.max()) + 1
            flat = np.ctypeslib.as_array((ctypes.c_uint8 * (count * out.itemsize)).from_address(C)).view(out)
            flat[at] = product.astype(out)

    from tests.runtime.cuda.fake_cupy import enqueue_on  # here: fake_cupy imports this module

    enqueue_on(streams[handle], run)
