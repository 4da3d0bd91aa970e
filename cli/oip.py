"""The client side of the Open Inference Protocol: numpy arrays into a request body (JSON, or JSON followed by
binary tensors per Triton's extension) and a response body back into named arrays. The server's answer is
checked like any input: a malformed one is a `ClientError`, never a crash."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from luminal.cli.client import ClientError
from luminal.gateway.json_floats import float_values, strict_dumps, tensor_values
from luminal.gateway.tensor_codec import DATATYPES, FLOAT_DATATYPES

# bfloat16 values have no JSON form of their own: they travel as float32 numbers, which hold them exactly.
_JSON_DTYPE = {"BF16": np.dtype(np.float32)}


def _json_safe(array: np.ndarray, datatype: str) -> np.ndarray:
    return array.astype(_JSON_DTYPE[datatype]) if datatype in _JSON_DTYPE else array


@dataclass(frozen=True)
class RequestBody:
    body: bytes
    json_length: int | None  # where the JSON ends when binary tensors follow it, else None


def encode_request(inputs: dict[str, tuple[str, np.ndarray]], binary: bool) -> RequestBody:
    """`inputs` maps each name to (OIP datatype, array already of that datatype's dtype)."""
    entries, blobs = [], []
    for name, (datatype, array) in inputs.items():
        entry: dict[str, Any] = {"name": name, "shape": list(array.shape), "datatype": datatype}
        if binary:
            blob = np.ascontiguousarray(array, dtype=DATATYPES[datatype]).tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = tensor_values(_json_safe(array, datatype))  # NaN as "NaN": strict JSON
        entries.append(entry)
    doc: dict[str, Any] = {"inputs": entries}
    if binary:
        doc["parameters"] = {"binary_data_output": True}
    head = strict_dumps(doc)
    return RequestBody(head + b"".join(blobs), len(head) if binary else None)


def decode_response(body: bytes, json_length: str | None) -> dict[str, tuple[str, np.ndarray]]:
    """The outputs by name, each as (OIP datatype, array)."""
    try:
        cut = len(body) if json_length is None else int(json_length)
        if not 0 <= cut <= len(body):
            raise ValueError(f"Inference-Header-Content-Length {cut} is outside the body's {len(body)} bytes")
        doc = json.loads(body[:cut])
        outputs, offset = {}, cut
        for entry in doc["outputs"]:
            array, offset = _decode_output(entry, body, offset)
            outputs[str(entry["name"])] = (entry["datatype"], array)
        if offset != len(body):
            raise ValueError(f"{len(body) - offset} bytes of binary data belong to no output")
        return outputs
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ClientError(f"the server's inference answer is malformed: {e!s:.200}") from None


def _decode_output(entry: dict[str, Any], body: bytes, offset: int) -> tuple[np.ndarray, int]:
    datatype, shape = entry["datatype"], tuple(int(d) for d in entry["shape"])
    if datatype not in DATATYPES:
        raise ValueError(f"output {entry['name']!r} has the unknown datatype {datatype!r}")
    dtype = DATATYPES[datatype]
    size = (entry.get("parameters") or {}).get("binary_data_size")
    if size is None:
        data = entry["data"]
        if datatype in FLOAT_DATATYPES:  # non-finite values arrive as "NaN", "Infinity", "-Infinity"
            data = float_values(data)
            if data is None:
                raise ValueError(f"output {entry['name']!r} holds values that are not {datatype}")
        return np.asarray(data, dtype=_JSON_DTYPE.get(datatype, dtype)).astype(dtype).reshape(shape), offset
    if not isinstance(size, int) or offset + size > len(body):
        raise ValueError(f"output {entry['name']!r}: binary_data_size {size!r} runs past the body")
    return np.frombuffer(body[offset : offset + size], dtype=dtype).reshape(shape), offset + size
