"""The host shim's driver casts each buffer to the pointer type the generated CUDA declares it with: its table of
type names (runtime/cuda/shim.py, which imports no code generator) must be the CUDA dialect's."""

from luminal.compiler.renderer.dialects import CUDA
from luminal.runtime.cuda.shim import STORAGE


def test_the_shims_pointer_types_are_the_cuda_dialects():
    assert STORAGE == CUDA.storage
