"""CUDA code generation: the kernel IR as CUDA C++ kernels and the launch plan that runs them.

launch.py decides each kernel's shape on the GPU (a thread per element, a warp or a block per output, a tiled
GEMM, attention a block per query row) and the grid that covers it; the kernels are rendered by the one C-like
renderer in the CUDA dialect (compiler/render.py, compiler/dialects.py); program.py writes the whole source.
"""
