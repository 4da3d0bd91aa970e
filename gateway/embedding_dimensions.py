"""`dimensions` of `POST /openai/v1/embeddings`: a shorter embedding, given only where the model was trained for
it (Matryoshka representation learning, declared at deploy with `luminal deploy --matryoshka`).

A prefix of another model's embedding is not an embedding of anything (its similarities are noise), so it is a
400 naming why, not a silently worse answer. A cut embedding of a model that normalises is normalised again, as
OpenAI's text-embedding-3 answers: cosines are the same either way, and dot products stay cosines.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from luminal.gateway.openai_errors import OpenAIError


def checked_dimensions(signature: dict[str, Any], model: str, dimensions: int | None) -> int | None:
    """The width to cut embeddings to (None: the model's own), or a 400 naming why the model cannot give it."""
    width = signature["outputs"][0]["shape"][-1]
    if dimensions is None or dimensions == width:
        return None
    if dimensions > width:
        raise OpenAIError(400, f"model {model!r} gives {width} dimensions; it cannot give {dimensions}", "dimensions")
    if not signature.get("matryoshka", False):
        message = (f"model {model!r} gives {width} dimensions; it cannot give {dimensions}: it was not deployed "
                   "as trained to be cut (Matryoshka; luminal deploy --matryoshka)")  # fmt: skip
        raise OpenAIError(400, message, "dimensions")
    return dimensions


def cut(vector: np.ndarray, dimensions: int | None, normalized: bool) -> np.ndarray:
    """The first `dimensions` values, rescaled to unit length where the model's embeddings have it."""
    if dimensions is None:
        return vector
    prefix = vector[:dimensions]
    if not normalized:
        return prefix
    return prefix / max(float(np.linalg.norm(prefix)), 1e-12)  # F.normalize's floor: an all-zero prefix stays 0
