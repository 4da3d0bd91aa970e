"""cuBLAS's C API through ctypes (runtime/cuda/cublas_library.py): found where CuPy's CUDA wheels put it, every
call typed, errors named. The calls themselves run on a device (test_device_cublas.py)."""

import ctypes

import pytest

from luminal.runtime.cuda import cublas_library
from luminal.runtime.registry import RuntimeUnavailable


def _loaded():
    try:
        return cublas_library.load()
    except RuntimeUnavailable as e:
        pytest.skip(f"no libcublas here: {e}")


def test_every_call_the_steps_make_is_found_and_typed():
    lib = _loaded()
    for symbol, argtypes in cublas_library.SIGNATURES.items():
        function = getattr(lib, symbol)
        assert function.argtypes == argtypes and function.restype is ctypes.c_int


def test_a_missing_library_is_unavailable_and_names_what_to_install(monkeypatch):
    monkeypatch.setattr(cublas_library, "_candidates", lambda: [])
    cublas_library.load.cache_clear()
    try:
        with pytest.raises(RuntimeUnavailable, match="nvidia-cublas"):
            cublas_library.create()
    finally:
        cublas_library.load.cache_clear()


def test_a_failed_call_names_the_call_and_its_status(monkeypatch):
    class Refusing:
        def cublasSetWorkspace_v2(self, handle, pointer, size):  # noqa: N802 - cuBLAS's name
            return 7

    monkeypatch.setattr(cublas_library, "load", Refusing)
    with pytest.raises(cublas_library.CublasError, match="cublasSetWorkspace failed: CUBLAS_STATUS_INVALID_VALUE"):
        cublas_library.setWorkspace(1, 2, 3)
