"""The renderer in the CUDA dialect, with reductions a group of threads shares.

In a kernel where a warp or a block computes one output element (or one row's statistics), every thread of the
group walks the same expression with the same indices, so control flow outside a reduction's body is the same
for all of them. A reduction met there (not inside another reduction's body) is split over the group: thread
`lm_lane` takes the steps lm_lane, lm_lane + lm_group, ..., then a fold (prelude.py) gives every thread the
whole result. Reductions inside a reduction's body stay sequential per thread.
"""

from __future__ import annotations

from luminal.compiler.kernels import ir
from luminal.compiler.renderer.dialects import CUDA
from luminal.compiler.renderer.render import Emitter

FOLDS = {"warp": "lm_warp_fold", "block": "lm_block_fold"}


class CudaEmitter(Emitter):
    def __init__(self, buffers: dict[str, str], group: str | None = None):
        super().__init__(buffers, CUDA)
        self.group = group  # None (one thread per element), "warp" or "block": who shares a reduction

    def cooperative(self) -> bool:
        return self.group is not None and self.reducing == 0

    def reduction_loop(self, v: ir.Reduce) -> str:
        if not self.cooperative():
            return super().reduction_loop(v)
        return f"for (int64_t {v.var} = lm_lane; {v.var} < {v.extent.render_c()}; {v.var} += lm_group) {{"

    def combine(self, v: ir.Reduce, acc: str) -> None:
        if self.cooperative():
            self.stmt(f"{acc} = {FOLDS[self.group]}({acc}, lm_fold_{v.op}());")


def cuda_emitter(group: str | None = None):
    """A constructor with the signature the shared generators call (`emitter_cls(ptrs)`)."""
    return lambda buffers: CudaEmitter(buffers, group)
