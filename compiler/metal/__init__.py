"""Metal code generation: the kernel IR as Metal Shading Language for Apple GPUs.

Apple GPUs run the same kernel shapes as CUDA ones (a thread, a 32-wide SIMD group or a threadgroup per output
element or row, a tiled GEMM, attention a threadgroup per query row), so a Metal program has the GPU layer's
launch plan, merges and kernel bodies (compiler/gpu/), which CUDA's generator shares; what differs is the Metal
dialect's (compiler/renderer/dialects.py): the kernel signature with `[[buffer(n)]]` and index attributes, half
and bfloat, threadgroup memory and barriers, SIMD shuffles and metal:: math, which prelude.py and program.py
supply. backend.py is the interface the pipeline calls (compiler/backends.py).
"""
