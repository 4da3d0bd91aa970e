"""The CPU backend: C over OpenMP threads. Its generator (codegen_c.py and the GEMM, quantized GEMM, integer GEMM
and attention kernels) and its passes (weights dequantised in the GEMM's loads, integer operands, panels packed at
load)."""
