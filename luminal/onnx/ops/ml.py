"""ai.onnx.ml operators that are plain tensor computations: Binarizer and ArrayFeatureExtractor.

The domain's other operators (LabelEncoder, TreeEnsemble, ...) are not translated.
"""

from __future__ import annotations

import luminal.functional as F
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import require_float
from luminal.onnx.registry import translates
from luminal.tensor import Tensor

DOMAIN = "ai.onnx.ml"


@translates(f"{DOMAIN}.Binarizer", attrs={"threshold"})
def binarizer(ctx: NodeContext) -> Tensor:
    x = require_float(ctx, ctx.x(0))
    return F.cast(F.gt(x, float(ctx.attr("threshold", 0.0))), x.dtype)  # 1 where x > threshold, else 0


@translates(f"{DOMAIN}.ArrayFeatureExtractor")
def array_feature_extractor(ctx: NodeContext) -> Tensor:
    """The last axis's entries at the (flattened) indices: [..., k]; a 1-D input gives [1, k], as ONNX Runtime."""
    x, indices = ctx.x(0), ctx.x(1)
    if not indices.dtype.is_int:
        raise ctx.error(f"indices must be integers, got {indices.dtype.name}")
    picked = F.index_select(x, -1, F.reshape(indices, [-1]))
    return F.unsqueeze(picked, 0) if x.ndim == 1 else picked
