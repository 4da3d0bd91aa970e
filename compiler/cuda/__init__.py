"""CUDA code generation: the kernel IR as CUDA C++ kernels and the launch plan that runs them.

The launch plan and most kernel bodies are the GPU layer's, shared with Metal (compiler/gpu/): gpu/launch.py
decides each kernel's shape on the GPU (a thread per element, a warp or a block per output, a split-K GEMV, a
tiled GEMM, attention a block per query row or, for single queries over a long key axis, flash decoding: key
blocks then a combine) and the grid that covers it; the kernels are rendered by the one C-like renderer in the
CUDA dialect (compiler/renderer/render.py, compiler/renderer/dialects.py). What is CUDA's alone is here: flash
decoding in one launch, where the last block of a row combines (arrivals.py), tensor-core GEMMs, library GEMMs,
and program.py, which writes the whole source.

Decode: the linear layers of a decode step are GEMVs (compiler/gpu/gemv.py, compiler/analysis/gemv_plan.py): a
block per 4 outputs, the contraction split over 256 threads, the weight read in 16-byte loads where alignment is
proven (scalar otherwise; Q8_0 int8 weights 16 at a time, dequantised in registers), folded deterministically;
over many sequences each block computes its outputs for a group of rows per weight load, so the weights are read
once. On CUDA targets an attention computes its operands' element-wise producers (compiler/fusion/fuse.py): RoPE
on the queries, the cache's casts. Its scratch (a split attention's partial results) is a temp buffer labelled
with the kernel (compiler/analysis/attention_plan.py, compiler/analysis/memory.py). A GEMV stores the residual
sum its readers add to it (compiler/fusion/fuse_residual.py), and each norm is computed in the prologue of the
GEMVs that read it (compiler/gpu/norm_prologue.py): a decode layer has no row kernel left.
Prefill: half-type GEMMs run on tensor cores (gemm_mma.py, wmma); a GEMM with nothing fused into it may instead
be one cuBLAS call (library_gemm.py: a "cublas" step of the launch plan that the runtime issues), in the
candidate variant gemm_choice.py builds, ranked by the roofline or timed with profile=True.
Not done: pre-packing weights stored [K, N] for the GEMV (GPT-2's Conv1D layers run as GEMMs, so its norms
stay row kernels), cp.async double buffering in the wmma GEMM.
"""
