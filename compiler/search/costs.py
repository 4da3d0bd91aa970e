"""E-node costs for extraction: the roofline of `compiler/cost.py`, charged per op of the extracted graph.

Extraction sees one e-node at a time, before fusion, so each op is charged as if it ran as its own kernel:
the larger of its output bytes over the memory bandwidth and its FLOPs over the rate it runs at (a GEMM
at the target's matrix rate, anything else at the loop rate). That is what separates the alternatives the
rules add: a MatMul writes only its output and runs tiled; the Mul it replaces writes the whole broadcast
product and the SumReduce runs as a plain loop. The whole compiled candidates are then ranked again with
the kernel-level model after fusion (program.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection

from luminal.compiler.cost import size
from luminal.compiler.search.encode import Encoding
from luminal.compiler.targets import Target, get_target
from luminal.dtypes import float32

FREE = frozenset(("View", "Sink", "NoSinks", "Input", "Weight", "ConstF", "ConstI", "NegZero"))
TRANSCENDENTAL = frozenset(("Log2", "Exp2", "Sin", "Sqrt", "Recip"))
BYTES_PER_ELEMENT = 4  # an estimate: e-nodes carry no dtype, and float32 is what the models compute in


def _elements(shape) -> int:
    return math.prod(size(d, None) for d in shape)


def roofline_cost(enc: Encoding, target: Target | str, exclude: Collection[str] = ()) -> Callable[[str, list], float]:
    """cost(constructor name, literal arguments) in estimated seconds; names in `exclude` are never chosen."""
    target = get_target(target)
    loop_rate = target.peak_for(float32) * target.loop_efficiency
    gemm_rate = target.peak_for(float32, matrix_units=True)

    def cost(name: str, params: list) -> float:
        if name in FREE:
            return 0.0
        if name in exclude:
            return math.inf
        if name == "Iota":
            return target.launch_overhead_s
        view = enc.views[params[1] if name == "Gather" else params[0]]
        n = _elements(view.shape)  # the op's element count (a reduce's input, a gather's output)
        if name == "Attention":  # q as [..., L, S, E] and v as [..., L, N, S]: two GEMMs' work, one output
            pv = _elements(enc.views[params[2]].shape)
            out = pv // max(size(enc.views[params[2]].shape[-1], None), 1)
            rate, flops = gemm_rate, 2 * n + 2 * pv
        elif name in ("SumReduce", "MaxReduce", "MatMul"):
            axis = params[-1]
            out = n // max(size(view.shape[axis], None), 1)
            rate, flops = (gemm_rate, 2 * n) if name == "MatMul" else (loop_rate, n)
        else:
            out, rate, flops = n, loop_rate, n * (4 if name in TRANSCENDENTAL else 1)
        return max(out * BYTES_PER_ELEMENT / target.memory_bandwidth, flops / rate) + target.launch_overhead_s

    return cost
