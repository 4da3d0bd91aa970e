"""The device sampler (runtime/cuda/sampler.py) on the fake device: its CUDA source built through the host shim
with a launch entry, so `CudaSampler(fake_cupy)` runs the very kernel NVRTC compiled, on the CPU."""

import ctypes

from luminal.runtime.cuda import shim
from luminal.runtime.cuda.sampler import KERNEL, CudaSampler, source
from tests.runtime.cuda import fake_cupy

ARGUMENTS = ("int64_t*", "float*", "int64_t*", "float*", "const float*", "const float*", "const int64_t*",
             "const float*", "const uint32_t*", "const int64_t*")  # fmt: skip


def use_sampler_shim(threads: int) -> None:
    """The fake device's next module load runs the sampler's kernel at blocks of `threads`."""
    args = ", ".join(f"({kind})P[{j}]" for j, kind in enumerate(ARGUMENTS))
    entry = (
        f'extern "C" int lm_kernel_{KERNEL}(void** P, int64_t blocks) {{ lm_launch({KERNEL}, blocks, {threads}, '
        f"{args}); return lm_fibers_hung() ? {shim.HUNG} : 0; }}\n"
    )
    fake_cupy.Module.library = ctypes.CDLL(str(shim.build_library(source(threads) + "\n" + entry)))


def shim_sampler(threads: int = 32) -> CudaSampler:
    """A CudaSampler on the fake device; a small block by default (the shim runs each thread as a fiber)."""
    use_sampler_shim(threads)
    return CudaSampler(fake_cupy, threads)
