"""`ModelInferRequest` messages to the gateway's `InferRequest`, and results to `ModelInferResponse`, with the same
checks as the REST body (gateway/tensor_codec.py): names, datatypes, shapes, sizes, outputs, id, priority, timeout.

Input data comes either typed (`contents`, one repeated field per datatype family) or raw (`raw_input_contents`,
little-endian bytes, one entry per input, in input order, for every input at once). Outputs come back raw, as
Triton answers (tritonclient reads them so), unless the request gave its inputs typed: then typed where the
protocol has a field for the datatype (FP16 and BF16 have none, so a model with such an output answers raw).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from luminal.gateway.oip_grpc import messages as pb
from luminal.gateway.tensor_codec import (
    DATATYPES,
    MAX_ID_CHARS,
    InferRequest,
    TensorError,
    check_all_given,
    check_input_identity,
    checked_shape,
    decode_binary,
    expected_inputs,
    oip_datatype,
    requested_outputs,
    scheduling,
)

# The `InferTensorContents` field that holds each datatype's typed values (the narrow integers share the 32-bit
# fields). FP16 and BF16 have no typed field: they travel only raw.
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


def parameter_values(params: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    """A parameters map as plain values (whichever of the oneof's fields each one set)."""
    values = {}
    for key, param in params.items():
        choice = param.WhichOneof("parameter_choice")
        values[key] = None if choice is None else getattr(param, choice)
    return values


def parse_model_infer(request: pb.ModelInferRequest, signature: dict[str, Any]) -> InferRequest:
    """Decode and check a `ModelInferRequest` against the model's signature."""
    expected = expected_inputs(signature)
    if not request.inputs:
        raise TensorError("the request must have at least one input")
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise TensorError(f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs")
    inputs: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(request.inputs):
        check_input_identity(tensor.name, tensor.datatype, expected, inputs)
        shape = checked_shape(list(tensor.shape), tensor.name)
        if raw:
            if tensor.HasField("contents"):
                raise TensorError(f"input {tensor.name!r} has contents while raw_input_contents holds every input")
            inputs[tensor.name] = _raw_input(raw[i], tensor.name, tensor.datatype, shape)
        else:
            inputs[tensor.name] = _typed_input(tensor.contents, tensor.name, tensor.datatype, shape)
    check_all_given(expected, inputs)
    wanted = {"outputs": [{"name": o.name} for o in request.outputs]} if request.outputs else {}
    outputs, _ = requested_outputs(wanted, [e["name"] for e in signature["outputs"]])
    if len(request.id) > MAX_ID_CHARS:
        raise TensorError(f"id must be a string of at most {MAX_ID_CHARS} characters")
    priority, timeout_us = scheduling(parameter_values(request.parameters))
    return InferRequest(request.id or None, inputs, outputs, set(), priority, timeout_us)


def _raw_input(data: bytes, name: str, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    want = math.prod(shape) * DATATYPES[datatype].itemsize
    if len(data) != want:
        size = f"shape {list(shape)} of {datatype} is {want} bytes"
        raise TensorError(f"input {name!r}: {size}, raw contents {len(data)}")
    array, _ = decode_binary(memoryview(data), 0, want, name, datatype, shape)
    return array


def _typed_input(contents: pb.InferTensorContents, name: str, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise TensorError(f"input {name!r}: {datatype} data must be sent in raw_input_contents")
    values = getattr(contents, field)
    count = math.prod(shape)
    if len(values) != count:
        raise TensorError(f"input {name!r}: shape {list(shape)} needs {count} values, {field} holds {len(values)}")
    dtype = DATATYPES[datatype]
    if dtype.kind in "iu" and count:  # INT8 and INT16 travel in 32-bit fields: a value may not fit
        wide = np.asarray(values, dtype=np.int64 if dtype.kind == "i" else np.uint64)
        limits = np.iinfo(dtype)
        if wide.min() < limits.min or wide.max() > limits.max:
            raise TensorError(f"input {name!r}: {field} holds values outside {datatype}'s range")
    return np.asarray(values, dtype=dtype).reshape(shape)


def model_infer_response(
    model: str,
    version: str,
    request: InferRequest,
    results: dict[str, np.ndarray],
    signature: dict[str, Any],
    typed: bool,
) -> pb.ModelInferResponse:
    """The answer to `request`: typed contents when `typed` and every output's datatype has a field, else raw."""
    datatypes = {e["name"]: oip_datatype(e["dtype"]) for e in signature["outputs"]}
    typed = typed and all(datatypes[name] in CONTENTS_FIELD for name in request.outputs)
    response = pb.ModelInferResponse(model_name=model, model_version=version, id=request.id or "")
    for name in request.outputs:
        datatype = datatypes[name]
        array = np.ascontiguousarray(results[name], dtype=DATATYPES[datatype])
        tensor = response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        if typed:
            getattr(tensor.contents, CONTENTS_FIELD[datatype]).extend(array.ravel().tolist())
        else:
            response.raw_output_contents.append(array.tobytes())
    return response
