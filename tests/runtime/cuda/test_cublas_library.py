"""cuBLAS's C API through ctypes (runtime/cuda/cublas_library.py): found where CuPy's CUDA wheels put it, every
call typed, errors named. The calls themselves run on a device (test_device_cublas.py)."""

import pytest

from luminal.runtime.cuda import cublas_library
from luminal.runtime.registry import RuntimeUnavailable


def _loaded():
    try:
        return cublas_library.load()
    except RuntimeUnavailable as e:
        pytest.skip(f"no libcublas here: {e}")


def test_every_call_the_steps_make_is_in_the_library():
    lib = _loaded()  # loading looks up each symbol to type it: a missing one raises AttributeError there
    assert all(hasattr(lib, symbol) for symbol in cublas_library.SIGNATURES)


def test_each_wrapper_passes_as_many_arguments_as_its_signature_types(monkeypatch):
    """ctypes checks the count only when called, which is on a device: count here what each wrapper passes."""
    passed = {}

    class Counting:
        def __getattr__(self, symbol):
            return lambda *args: passed.__setitem__(symbol, len(args)) or 0

    monkeypatch.setattr(cublas_library, "load", Counting)
    cublas_library.create()
    cublas_library.destroy(1)
    cublas_library.setStream(1, 2)
    cublas_library.setWorkspace(1, 2, 3)
    cublas_library.gemmStridedBatchedEx(*range(23))
    assert passed == {symbol: len(types) for symbol, types in cublas_library.SIGNATURES.items()}


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
