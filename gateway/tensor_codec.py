"""Open Inference Protocol (KServe v2) tensors in and out, with Triton's binary-data extension.

A request body is JSON, optionally followed by raw tensor bytes: the `Inference-Header-Content-Length` header
says where the JSON ends, and each input with a `binary_data_size` parameter takes that many bytes, in input
order. Outputs are returned as JSON `data`, or as raw bytes after the JSON when the request asks
(`binary_data_output`, or `binary_data` per output). Every field is checked: the body is hostile.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from luminal.gateway.json_floats import NON_FINITE, float_values, strict_dumps, tensor_values

# Our graph dtypes by their OIP names (BYTES has no luminal dtype, so a model never takes it). Binary data is
# little-endian, row-major, as the extension defines.
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "INT8": np.dtype("i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "UINT8": np.dtype("u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "FP16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}
BY_LUMINAL_NAME = {"bool": "BOOL", "float16": "FP16", "bfloat16": "BF16", "float32": "FP32", "float64": "FP64"}
BY_LUMINAL_NAME |= {name.lower(): name for name in DATATYPES if "INT" in name}  # int8 -> INT8 .. uint64 -> UINT64
FLOAT_DATATYPES = {"FP16", "BF16", "FP32", "FP64"}  # the ones whose JSON data may hold "NaN", "Infinity", "-Infinity"
MAX_RANK = 32  # far above any model's rank; stops a shape list of a million entries early
# A request id is echoed in the answer and stored with a prediction: a correlation token, not a payload.
MAX_ID_CHARS = 256


class TensorError(ValueError):
    """The request names, shapes or encodes a tensor wrongly; the message says which and how (a 400)."""


@dataclass
class InferRequest:
    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: list[str]
    binary_outputs: set[str] = field(default_factory=set)
    # Triton's request parameters: `priority` (1 most urgent, 0 the default level) and `timeout` in
    # microseconds (how long the request may wait before its execution starts).
    priority: int = 0
    timeout_us: int | None = None


def oip_datatype(luminal_dtype: str) -> str:
    return BY_LUMINAL_NAME[luminal_dtype]


def oip_shape(shape_json: list[Any]) -> list[int]:
    """A signature's JSON shape as OIP metadata: constant dims as ints, symbolic ones as -1."""
    return [d if isinstance(d, int) else -1 for d in shape_json]


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, memoryview]:
    """The JSON part and the binary part of a request (all JSON when the header is absent)."""
    if header_length is None:
        return body, memoryview(b"")
    try:
        n = int(header_length)
    except ValueError:
        raise TensorError(f"Inference-Header-Content-Length {header_length!r:.40} is not an integer") from None
    if not 0 <= n <= len(body):
        raise TensorError(f"Inference-Header-Content-Length {n} is outside the body's {len(body)} bytes")
    return body[:n], memoryview(body)[n:]


def parse_json(data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise TensorError(f"the request is not valid JSON: {str(e)[:200]}") from None
    if not isinstance(doc, dict):
        raise TensorError("the request must be a JSON object")
    return doc


def checked_params(obj: dict[str, Any], where: str) -> dict[str, Any]:
    params = obj.get("parameters", {})
    if not isinstance(params, dict):
        raise TensorError(f"{where}: parameters must be an object")
    return params


def checked_shape(raw: Any, name: str) -> tuple[int, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_RANK:
        raise TensorError(f"input {name!r}: shape must be a list of at most {MAX_RANK} integers")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in raw):
        raise TensorError(f"input {name!r}: shape {raw!r:.100} must hold non-negative integers")
    return tuple(raw)


def flattened(data: Any, name: str) -> list[Any]:
    """Nested or flat JSON lists to one flat list, iteratively (a deep nesting cannot exhaust the stack)."""
    flat: list[Any] = []
    stack = [iter(data if isinstance(data, list) else [data])]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                if len(stack) > MAX_RANK:
                    raise TensorError(f"input {name!r}: data is nested deeper than {MAX_RANK}")
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _non_finite(value: Any) -> bool:
    if isinstance(value, str):
        return value in NON_FINITE
    return isinstance(value, float) and not math.isfinite(value)  # a bare NaN, or 1e999, in the JSON


def _checked_elements(flat: list[Any], datatype: str, name: str) -> list[Any]:
    """The values as numpy can take them: floats may be the strings "NaN", "Infinity", "-Infinity"."""
    if datatype == "BOOL":
        ok = all(isinstance(v, bool) for v in flat)
    elif datatype.startswith(("INT", "UINT")):
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in flat)
        if not ok and any(_non_finite(v) for v in flat):
            raise TensorError(f"input {name!r}: {datatype} data holds NaN or infinity, which only float tensors take")
    else:
        values = float_values(flat)
        if values is not None:
            return values
        ok = False
    if not ok:
        raise TensorError(f"input {name!r}: data holds values that are not {datatype}")
    return flat


def _decode_json_data(raw: dict[str, Any], name: str, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    if "data" not in raw:
        raise TensorError(f"input {name!r} has neither data nor a binary_data_size parameter")
    flat = flattened(raw["data"], name)
    count = math.prod(shape)
    if len(flat) != count:
        raise TensorError(f"input {name!r}: shape {list(shape)} needs {count} values, data holds {len(flat)}")
    flat = _checked_elements(flat, datatype, name)
    try:
        return np.array(flat, dtype=DATATYPES[datatype]).reshape(shape)
    except (OverflowError, ValueError) as e:
        raise TensorError(f"input {name!r}: {e}") from None


def decode_binary(binary: memoryview, offset: int, size: Any, name: str, datatype: str, shape: tuple[int, ...]):
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise TensorError(f"input {name!r}: binary_data_size must be a non-negative integer")
    dtype = DATATYPES[datatype]
    want = math.prod(shape) * dtype.itemsize
    if size != want:
        raise TensorError(f"input {name!r}: shape {list(shape)} of {datatype} is {want} bytes, binary_data_size {size}")
    if offset + size > len(binary):
        raise TensorError(f"input {name!r}: binary data ends after {len(binary) - offset} of its {size} bytes")
    array = np.frombuffer(binary[offset : offset + size], dtype=dtype).reshape(shape)
    if datatype == "BOOL" and array.view(np.uint8).max(initial=0) > 1:
        raise TensorError(f"input {name!r}: BOOL bytes must be 0 or 1")
    return array.copy(), offset + size  # a copy: the runtime gets aligned memory it owns


def expected_inputs(signature: dict[str, Any]) -> dict[str, str]:
    """The model's input names and their OIP datatypes."""
    return {e["name"]: oip_datatype(e["dtype"]) for e in signature["inputs"]}


def check_input_identity(name: str, datatype: Any, expected: dict[str, str], given: dict[str, Any]) -> None:
    """An input's name is the model's, not given before (`given`), and its datatype the model's."""
    if name not in expected:
        raise TensorError(f"unknown input {name!r:.100}; the model takes {sorted(expected)}")
    if name in given:
        raise TensorError(f"input {name!r} is given twice")
    if datatype != expected[name]:
        raise TensorError(f"input {name!r} has datatype {datatype!r:.20}; the model takes {expected[name]}")


def check_all_given(expected: dict[str, str], given: dict[str, Any]) -> None:
    missing = sorted(set(expected) - set(given))
    if missing:
        raise TensorError(f"missing input(s) {missing}")


def parse_infer_request(body: bytes, header_length: str | None, signature: dict[str, Any]) -> InferRequest:
    """Decode and check an infer request against the model's signature (names and datatypes; the runtime checks
    shapes against the symbolic dims)."""
    json_part, binary = split_body(body, header_length)
    doc = parse_json(json_part)
    expected = expected_inputs(signature)
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise TensorError("the request must have a non-empty list 'inputs'")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for raw in raw_inputs:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise TensorError("each input must be an object with a string 'name'")
        name, datatype = raw["name"], raw.get("datatype")
        check_input_identity(name, datatype, expected, inputs)
        shape = checked_shape(raw.get("shape"), name)
        params = checked_params(raw, f"input {name!r}")
        if "binary_data_size" in params:
            inputs[name], offset = decode_binary(binary, offset, params["binary_data_size"], name, datatype, shape)
        else:
            inputs[name] = _decode_json_data(raw, name, datatype, shape)
    if offset != len(binary):
        raise TensorError(f"{len(binary) - offset} bytes of binary data follow the inputs and belong to none")
    check_all_given(expected, inputs)
    outputs, binary_outputs = requested_outputs(doc, [e["name"] for e in signature["outputs"]])
    request_id = doc.get("id")
    if request_id is not None and (not isinstance(request_id, str) or len(request_id) > MAX_ID_CHARS):
        raise TensorError(f"id must be a string of at most {MAX_ID_CHARS} characters")
    priority, timeout_us = scheduling(checked_params(doc, "request"))
    return InferRequest(request_id, inputs, outputs, binary_outputs, priority, timeout_us)


MAX_TIMEOUT_US = 24 * 3600 * 10**6


def scheduling(params: dict[str, Any]) -> tuple[int, int | None]:
    priority = params.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 10:
        raise TensorError("priority must be an integer from 1 (most urgent) to 10, or 0 for the default")
    timeout = params.get("timeout")
    if timeout is not None and (
        not isinstance(timeout, int) or isinstance(timeout, bool) or not 0 < timeout <= MAX_TIMEOUT_US
    ):
        raise TensorError(f"timeout must be a positive integer of microseconds, at most {MAX_TIMEOUT_US}")
    return priority, timeout


def requested_outputs(doc: dict[str, Any], names: list[str]) -> tuple[list[str], set[str]]:
    default_binary = checked_params(doc, "request").get("binary_data_output", False)
    if not isinstance(default_binary, bool):
        raise TensorError("binary_data_output must be true or false")
    raw_outputs = doc.get("outputs")
    if raw_outputs is None:
        return names, set(names) if default_binary else set()
    if not isinstance(raw_outputs, list):
        raise TensorError("outputs must be a list")
    chosen, binary = [], set()
    for raw in raw_outputs:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise TensorError("each requested output must be an object with a string 'name'")
        name = raw["name"]
        if name not in names:
            raise TensorError(f"unknown output {name!r:.100}; the model has {names}")
        if name in chosen:
            raise TensorError(f"output {name!r} is requested twice")
        wants_binary = checked_params(raw, f"output {name!r}").get("binary_data", default_binary)
        if not isinstance(wants_binary, bool):
            raise TensorError(f"output {name!r}: binary_data must be true or false")
        chosen.append(name)
        if wants_binary:
            binary.add(name)
    return chosen, binary


def encode_infer_response(
    model: str, version: str, request: InferRequest, results: dict[str, np.ndarray], signature: dict[str, Any]
) -> tuple[bytes, int | None]:
    """The response body and, when binary outputs follow the JSON, the JSON part's length (for the header)."""
    dtypes = {e["name"]: oip_datatype(e["dtype"]) for e in signature["outputs"]}
    entries, blobs = [], []
    for name in request.outputs:
        array = np.asarray(results[name])
        datatype = dtypes[name]
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if name in request.binary_outputs:
            blob = np.ascontiguousarray(array, dtype=DATATYPES[datatype]).tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            plain = array.astype(np.float32) if datatype == "BF16" else array  # bf16 has no Python float form
            entry["data"] = tensor_values(plain)
        entries.append(entry)
    doc: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": entries}
    if request.id is not None:
        doc["id"] = request.id
    header = strict_dumps(doc)
    if not blobs:
        return header, None
    return header + b"".join(blobs), len(header)
