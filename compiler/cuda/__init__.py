"""CUDA code generation: the kernel IR as CUDA C++ kernels and the launch plan that runs them.

launch.py decides each kernel's shape on the GPU (a thread per element, a warp or a block per output, a tiled
GEMM, attention a block per query row) and the grid that covers it; the kernels are rendered by the one C-like
renderer in the CUDA dialect (compiler/render.py, compiler/dialects.py); program.py writes the whole source.

Correct first, fast later: 16-byte vectorised loads where an access is contiguous and aligned, tensor-core `mma`
for half-type GEMMs, split-K GEMV kernels with pre-packed weights for decode, and flash decoding (a long key
axis over several blocks, then a combine) are the next steps; the launch plan and kernel names stay as they are.
"""
