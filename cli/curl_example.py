"""The curl command `luminal deploy` prints: one request that works when pasted into bash.

Its body is an Open Inference Protocol request with zeros of each input's shape and datatype (gateway/
tensor_codec.py reads it), a symbolic dim at 1 (the metadata says only that a dim is symbolic, -1; 1 is the
smallest batch). The key is read from $LUMINAL_API_KEY inside double quotes, so bash expands it; the JSON and the
URL are quoted with shlex, so nothing in them is read by the shell.
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

# Above this many values the body is no line to paste: deploy suggests `luminal predict` with a .npy file instead.
MAX_VALUES = 256


def _zero(datatype: str) -> bool | int | float:
    if datatype == "BOOL":
        return False
    return 0 if "INT" in datatype else 0.0  # INT8..UINT64 take JSON integers, FP16..FP64 numbers


def example_request(inputs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """An infer request for a model with these inputs (OIP metadata: name, datatype, shape with -1 for a symbolic
    dim), or None when its data would hold more than MAX_VALUES values."""
    tensors = []
    for spec in inputs:
        shape = [1 if d < 0 else d for d in spec["shape"]]
        tensors.append({"name": spec["name"], "shape": shape, "datatype": spec["datatype"],
                        "data": [_zero(spec["datatype"])] * math.prod(shape)})  # fmt: skip
    if sum(len(t["data"]) for t in tensors) > MAX_VALUES:
        return None
    return {"inputs": tensors}


def curl_command(endpoint: str, inputs: list[dict[str, Any]]) -> str | None:
    """The command line, or None when the model's inputs are too large to spell out (see MAX_VALUES)."""
    body = example_request(inputs)
    if body is None:
        return None
    return (
        f'curl -H "Authorization: Bearer $LUMINAL_API_KEY" -H "Content-Type: application/json" '
        f"{shlex.quote(endpoint)} -d {shlex.quote(json.dumps(body, separators=(',', ':')))}"
    )
