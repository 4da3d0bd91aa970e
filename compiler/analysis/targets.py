"""Targets are data: the figures the roofline cost model (`cost.py`) ranks candidate programs with.

Each GPU entry is the vendor's published datasheet figure for the named part (dense throughput, never the
"with sparsity" number NVIDIA quotes beside it). Shared memory per block is the most one thread block may
opt into, from the CUDA C++ Programming Guide's compute-capability table (Metal: the threadgroup memory limit
of Apple's Metal feature-set tables). Launch overheads are not datasheet figures: they are order-of-magnitude
estimates of one kernel's issue cost, which is what they need to be to rank a 1-kernel program above a
10-kernel one.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.dtypes import DType

KB, GB = 1024, 10**9
GIB = 2**30
TERA = 10**12


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  # "cpu", "cuda" or "metal": which code generator and runtime serve it
    memory_bandwidth: float  # bytes/s from device memory (DRAM / HBM / unified memory)
    peak_flops: float  # fp32 FLOP/s on the general-purpose lanes (what element-wise IR kernels run on)
    peak_flops_fp16: float  # fp16 FLOP/s on the matrix units (tensor cores) where there are any, dense
    peak_flops_bf16: float  # bf16 likewise; the fp32 rate where the hardware has no bf16 path
    sm_count: int  # GPU: streaming multiprocessors (NVIDIA) / GPU cores (Apple); CPU: cores
    shared_memory_per_block: int  # bytes one block (threadgroup) may use; CPU: the per-core L2 it tiles for
    launch_overhead_s: float  # seconds to issue one kernel (an estimate, see the module docstring)
    memory_bytes: int  # device memory capacity: bounds the memory plan and the batch a worker can hold
    # The fraction of peak_flops a generated loop kernel reaches (an estimate): only GEMMs are register- and
    # cache-blocked, so a sum of products written as a plain loop runs well below the roof a GEMM reaches.
    loop_efficiency: float = 0.25
    # The fraction of the matrix-unit (or fp32) peak a generated GEMM kernel reaches: 1 where nothing better is
    # known. On CUDA targets an estimate for 64 x 64 wmma tiles staged synchronously (no cp.async, no double
    # buffering), to be replaced by bench/gpu.py (c)'s measurement.
    gemm_efficiency: float = 1.0
    # A GEMM given to a vendor library (cuBLAS on CUDA targets, compiler/cuda/library_gemm.py): the share of
    # the peak it reaches on large tiles (0: no library here) and the fixed cost of a call beyond a kernel
    # launch. Estimates: cuBLAS is commonly measured at 70-80% of an H100's dense bf16 peak for large GEMMs.
    library_gemm_efficiency: float = 0.0
    library_call_s: float = 0.0
    # GPUs: a GEMV computes its input vector (a fused norm with it) once per block, not per output element.
    stages_gemv_vectors: bool = False

    def __post_init__(self):
        if self.kind not in ("cpu", "cuda", "metal"):
            raise ValueError(f"target {self.name!r}: kind must be 'cpu', 'cuda' or 'metal', not {self.kind!r}")

    def peak_for(self, dtype: DType, matrix_units: bool = False) -> float:
        """FLOP/s for arithmetic in `dtype`; the matrix-unit rates apply only to kernels that use them (GEMMs)."""
        if matrix_units and dtype.name == "float16":
            return self.peak_flops_fp16
        if matrix_units and dtype.name == "bfloat16":
            return self.peak_flops_bf16
        return self.peak_flops


# What the generated GPU kernels do (compiler/gpu/): a GEMV stages its vector once per block.
GPU_KERNELS = {"stages_gemv_vectors": True}
# Generated GEMMs against cuBLAS on every CUDA target (estimates, see the fields above).
CUDA_GEMMS = {"gemm_efficiency": 0.35, "library_gemm_efficiency": 0.75, "library_call_s": 2e-6} | GPU_KERNELS

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        # This machine class: a 2-vCPU slice of an AMD EPYC (AVX2 + FMA, ~2.6 GHz, 24 GiB). ESTIMATES, not
        # measurements: 2 cores x 2.6 GHz x 32 fp32 FLOP/cycle (two 8-wide FMA pipes) ~ 166 GFLOP/s, and
        # ~20 GB/s as one slice's share of the socket's DRAM bandwidth. No matrix units: half types run at fp32.
        Target("cpu", "cpu", 20 * GB, 166e9, 166e9, 166e9, 2, 1024 * KB, 2e-6, 24 * GIB),
        # NVIDIA H100 SXM5 80GB datasheet: 3.35 TB/s HBM3, 67 TFLOPS fp32, 989 TFLOPS fp16/bf16 tensor (dense),
        # 132 SMs; compute capability 9.0 allows 227 KB of shared memory per block. ~2 us per launch: CUDA-graph
        # replay (DESIGN.md's single-issue launch) amortises the driver cost but not the per-kernel tail.
        Target(
            "h100", "cuda", 3.35 * TERA, 67 * TERA, 989 * TERA, 989 * TERA, 132, 227 * KB, 2e-6, 80 * GB, **CUDA_GEMMS
        ),
        # NVIDIA H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s; the same GH100 compute as the H100 SXM.
        Target(
            "h200", "cuda", 4.8 * TERA, 67 * TERA, 989 * TERA, 989 * TERA, 132, 227 * KB, 2e-6, 141 * GB, **CUDA_GEMMS
        ),
        # NVIDIA A100 80GB SXM datasheet: 2,039 GB/s HBM2e, 19.5 TFLOPS fp32, 312 TFLOPS fp16/bf16 tensor (dense),
        # 108 SMs; compute capability 8.0 allows 163 KB of shared memory per block.
        Target(
            "a100",
            "cuda",
            2.039 * TERA,
            19.5 * TERA,
            312 * TERA,
            312 * TERA,
            108,
            163 * KB,
            2e-6,
            80 * GB,
            **CUDA_GEMMS,
        ),
        # NVIDIA L4 datasheet: 24 GB GDDR6 at 300 GB/s, 30.3 TFLOPS fp32, 121 TFLOPS fp16/bf16 tensor (dense),
        # 58 SMs; compute capability 8.9 allows 99 KB of shared memory per block.
        Target("l4", "cuda", 300 * GB, 30.3 * TERA, 121 * TERA, 121 * TERA, 58, 99 * KB, 2e-6, 24 * GB, **CUDA_GEMMS),
        # NVIDIA T4 datasheet: 16 GB GDDR6 at 320 GB/s, 8.1 TFLOPS fp32, 65 TFLOPS fp16 tensor (mixed precision),
        # 40 SMs; Turing (compute capability 7.5) has no bf16 tensor path and 64 KB of shared memory per block.
        Target("t4", "cuda", 320 * GB, 8.1 * TERA, 65 * TERA, 8.1 * TERA, 40, 64 * KB, 3e-6, 16 * GB, **CUDA_GEMMS),
        # Apple silicon, the base chip with its largest GPU. Apple publishes bandwidth and memory; the fp32 rate is
        # cores x 128 ALUs x 2 FLOP x clock, as listed by nanoreview.info (M1), Apple's launch figure (M2) and
        # hmc-tech.com (M3 at 1398 MHz, M4 at 1470 MHz). Apple GPUs run fp16 at the fp32 rate and have no separate
        # matrix-unit peak; every family allows 32 KB of threadgroup memory. A Metal dispatch costs more to issue
        # than a graph-replayed CUDA kernel (~5 us, est.).
        # M1, 8-core GPU: LPDDR4X-4266 on 128 bits, 68.25 GB/s; 2.6 TFLOPS; up to 16 GB.
        Target("m1", "metal", 68.25 * GB, 2.6 * TERA, 2.6 * TERA, 2.6 * TERA, 8, 32 * KB, 5e-6, 16 * GB, **GPU_KERNELS),
        # M2, 10-core GPU: 100 GB/s unified memory, 3.6 TFLOPS, up to 24 GB.
        Target("m2", "metal", 100 * GB, 3.6 * TERA, 3.6 * TERA, 3.6 * TERA, 10, 32 * KB, 5e-6, 24 * GB, **GPU_KERNELS),
        # M3, 10-core GPU: 100 GB/s, 3.58 TFLOPS, up to 24 GB.
        Target(
            "m3", "metal", 100 * GB, 3.58 * TERA, 3.58 * TERA, 3.58 * TERA, 10, 32 * KB, 5e-6, 24 * GB, **GPU_KERNELS
        ),
        # M4, 10-core GPU: LPDDR5X-7500, 120 GB/s; 3.76 TFLOPS; up to 32 GB.
        Target(
            "m4", "metal", 120 * GB, 3.76 * TERA, 3.76 * TERA, 3.76 * TERA, 10, 32 * KB, 5e-6, 32 * GB, **GPU_KERNELS
        ),
    )
}


def get_target(name: str | Target) -> Target:
    """The registered target called `name` (a Target passes through, so callers may take either)."""
    if isinstance(name, Target):
        return name
    try:
        return TARGETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown target {name!r}; valid targets: {', '.join(TARGETS)}") from None
