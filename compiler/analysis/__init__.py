"""What the stages and generators read about a program without changing it: the targets, the GEMM, GEMV and
attention plans and GEMM operands, the memory plan, the roofline cost model and profiling of candidates."""
