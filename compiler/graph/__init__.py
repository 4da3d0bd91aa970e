"""Graph level: the deterministic passes over the primitive graph (passes.py, rebuild.py) and the ops only the
compiler adds to a graph (fused_ops.py: MatMul, Attention, Inline), which the search writes and lowering reads."""
