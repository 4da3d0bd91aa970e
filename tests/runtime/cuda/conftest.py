import pytest

from luminal.runtime.cuda import cublas
from tests.runtime.cuda import fake_cublas


@pytest.fixture
def fake_cublas_library(monkeypatch):
    """The fake device's cuBLAS (fake_cublas.py) in place of libcublas, for the executables a test loads."""
    monkeypatch.setattr(cublas, "cublas_library", fake_cublas)
