"""Nearest-neighbour upsampling: a gather of source rows and columns whose positions are known at import."""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
from luminal.torch.call import Call
from luminal.torch.registry import translates


def _nearest_sources(size_in: int, size_out: int, scale: float | None) -> list[int]:
    """torch's nearest rule: source = min(floor(o * s), in - 1), s = 1 / scale_factor when one was given and
    in / out otherwise, computed in float32 as torch's CPU kernel does."""
    s = np.float32(1.0 / scale) if scale else np.float32(size_in) / np.float32(size_out)
    return [min(int(np.floor(np.float32(o) * s)), size_in - 1) for o in range(size_out)]


def _upsample(c: Call, spatial: int, output_size, scales):
    x = c["input"] if "input" in c.args else c["self"]
    sizes = list(x.shape[-spatial:])
    if not all(isinstance(n, int) for n in sizes):
        raise c.unsupported(f"symbolic spatial sizes {sizes} are not supported")
    scales = list(scales) if scales else [None] * spatial
    outs = list(output_size) if output_size else [int(np.floor(n * s)) for n, s in zip(sizes, scales)]
    for k, (n, out, scale) in enumerate(zip(sizes, outs, scales)):
        if out != n:
            axis = x.ndim - spatial + k
            index = F.tensor(x.graph, _nearest_sources(n, out, scale), dtype=dt.int64)
            x = F.index_select(x, axis, index)
    return x


@translates("aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec")
def upsample_nearest_vec(c: Call):
    spatial = 1 if "1d" in c.name else 2
    return _upsample(c, spatial, c.get("output_size"), c.get("scale_factors"))


@translates("aten.upsample_nearest2d.default")
def upsample_nearest2d(c: Call):
    scales = [c.get("scales_h"), c.get("scales_w")]
    return _upsample(c, 2, c["output_size"], scales if all(scales) else None)
