"""E-node costs for extraction: the roofline of `compiler/analysis/cost.py`, charged per op of the extracted graph.

Extraction sees one e-node at a time, before fusion, so each op is charged as if it ran as its own kernel:
the larger of its output bytes over the memory bandwidth and its FLOPs over the rate it runs at (a GEMM
at the target's matrix rate, anything else at the loop rate). That is what separates the alternatives the
rules add: a MatMul writes only its output and runs tiled; the Mul it replaces writes the whole broadcast
product and the SumReduce runs as a plain loop. The whole compiled candidates are then ranked again with
the kernel-level model after fusion (program.py).

A producer chosen through `Inline` (search/rules_fusion.py) is charged only its arithmetic: its reader
computes it, so its store, the reader's load and its launch are saved. That is the only thing that makes
extraction prefer a fused alternative, and it always does where the rules allow one; whether the fused kernel
is worth it in the kernel IR's terms is checked again where it is carried out (compiler/fusion/fuse_chosen.py).
"""

from __future__ import annotations

import math
from collections.abc import Collection

from luminal.compiler.analysis.cost import size
from luminal.compiler.analysis.targets import Target, get_target
from luminal.compiler.search.encode import Encoding
from luminal.dtypes import float32

FREE = frozenset(("View", "Sink", "NoSinks", "Input", "Weight", "ConstF", "ConstI", "NegZero"))
TRANSCENDENTAL = frozenset(("Log2", "Exp2", "Sin", "Sqrt", "Recip"))
BYTES_PER_ELEMENT = 4  # an estimate: e-nodes carry no dtype, and float32 is what the models compute in


def _elements(shape) -> int:
    return math.prod(size(d, None) for d in shape)


class RooflineCost:
    """cost(constructor name, literal arguments) in estimated seconds; names in `exclude` are never chosen.

    `inlined(name, params)` is what the same e-node costs computed in its reader's loop (chosen through an
    `Inline`): its arithmetic at the rate it runs at, without the store of its output or a launch.
    """

    def __init__(self, enc: Encoding, target: Target | str, exclude: Collection[str] = ()):
        self.enc, self.target, self.exclude = enc, get_target(target), frozenset(exclude)
        self.loop_rate = self.target.peak_for(float32) * self.target.loop_efficiency
        self.gemm_rate = self.target.peak_for(float32, matrix_units=True)

    def _work(self, name: str, params: list) -> tuple[int, float, int]:
        """(output elements, FLOP/s it runs at, FLOPs) of a compute e-node."""
        views = self.enc.views
        view = views[params[1] if name == "Gather" else params[0]]
        n = _elements(view.shape)  # the op's element count (a reduce's input, a gather's output)
        if name == "Attention":  # q as [..., L, S, E] and v as [..., L, N, S]: two GEMMs' work, one output
            pv = _elements(views[params[2]].shape)
            return pv // max(size(views[params[2]].shape[-1], None), 1), self.gemm_rate, 2 * n + 2 * pv
        if name in ("SumReduce", "MaxReduce", "MatMul"):
            out = n // max(size(view.shape[params[-1]], None), 1)
            return (out, self.gemm_rate, 2 * n) if name == "MatMul" else (out, self.loop_rate, n)
        return n, self.loop_rate, n * (4 if name in TRANSCENDENTAL else 1)

    def __call__(self, name: str, params: list) -> float:
        if name in FREE or name == "Inline":  # an Inline's cost is its producer's, inlined (extract.choose)
            return 0.0
        if name in self.exclude:
            return math.inf
        if name == "Iota":
            return self.target.launch_overhead_s
        out, rate, flops = self._work(name, params)
        return max(out * BYTES_PER_ELEMENT / self.target.memory_bandwidth, flops / rate) + self.target.launch_overhead_s

    def inlined(self, name: str, params: list) -> float:
        if name in FREE or name in ("Iota", "Inline"):
            return 0.0
        if name in self.exclude:
            return math.inf
        _, rate, flops = self._work(name, params)
        return flops / rate


def roofline_cost(enc: Encoding, target: Target | str, exclude: Collection[str] = ()) -> RooflineCost:
    return RooflineCost(enc, target, exclude)
