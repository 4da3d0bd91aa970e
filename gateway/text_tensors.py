"""Text in Open Inference Protocol requests, as Triton takes string inputs: one BYTES tensor named `text` of shape
[N] or [N, 1], its elements strings in JSON `data`, or in binary data as Triton serializes BYTES (each element a
4-byte little-endian length, then that many bytes). An embedding deployment tokenizes them itself.

The request's other fields (id, outputs, binary_data_output, priority, timeout) mean what they mean for tensors."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from luminal.gateway.openai_embedding_schemas import MAX_INPUTS
from luminal.gateway.tensor_codec import (
    InferRequest,
    TensorError,
    checked_params,
    checked_shape,
    flattened,
    parse_json,
    requested_outputs,
    scheduling,
    split_body,
)

TEXT_INPUT = "text"
MAX_TEXT_BYTES = 64 << 10  # one input's UTF-8: far past any encoder's max_seq_length tokens


@dataclass
class TextInferRequest:
    texts: list[str]
    truncate: bool  # request parameter: cut a text past the model's length instead of refusing it
    request: InferRequest  # id, outputs and scheduling; no tensor inputs


def is_text_request(body: bytes, header_length: str | None) -> bool:
    """Whether the request carries a BYTES input (then it is text; a bad body is refused by parse_text_request)."""
    try:
        doc = parse_json(split_body(body, header_length)[0])
    except TensorError:
        return False
    inputs = doc.get("inputs")
    return isinstance(inputs, list) and any(isinstance(i, dict) and i.get("datatype") == "BYTES" for i in inputs)


def parse_text_request(body: bytes, header_length: str | None, output_names: list[str]) -> TextInferRequest:
    """Decode and check a text request; every defect is a TensorError (a 400) naming it."""
    json_part, binary = split_body(body, header_length)
    doc = parse_json(json_part)
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list) or len(raw_inputs) != 1 or not isinstance(raw_inputs[0], dict):
        raise TensorError(f"an embedding model takes text as one BYTES input named {TEXT_INPUT!r}")
    raw = raw_inputs[0]
    if raw.get("name") != TEXT_INPUT or raw.get("datatype") != "BYTES":
        raise TensorError(f"input {raw.get('name')!r:.100} ({raw.get('datatype')!r:.20}): an embedding model takes "
                          f"text as one BYTES input named {TEXT_INPUT!r}")  # fmt: skip
    shape = checked_shape(raw.get("shape"), TEXT_INPUT)
    if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1) or not 1 <= shape[0] <= MAX_INPUTS:
        raise TensorError(f"input {TEXT_INPUT!r}: shape {list(shape)} must be [N] or [N, 1], N from 1 to {MAX_INPUTS}")
    params = checked_params(raw, f"input {TEXT_INPUT!r}")
    if "binary_data_size" in params:
        texts = _binary_strings(binary, params["binary_data_size"], shape[0])
    else:
        if binary:
            raise TensorError(f"{len(binary)} bytes of binary data follow the inputs and belong to none")
        texts = _json_strings(raw.get("data"), shape[0])
    request_params = checked_params(doc, "request")
    truncate = request_params.get("truncate", False)
    if not isinstance(truncate, bool):
        raise TensorError("truncate must be true or false")
    outputs, binary_outputs = requested_outputs(doc, output_names)
    request_id = doc.get("id")
    if request_id is not None and (not isinstance(request_id, str) or len(request_id) > 256):
        raise TensorError("id must be a string of at most 256 characters")
    priority, timeout_us = scheduling(request_params)
    request = InferRequest(request_id, {}, outputs, binary_outputs, priority, timeout_us)
    return TextInferRequest(texts, truncate, request)


def _json_strings(data: Any, count: int) -> list[str]:
    flat = flattened(data, TEXT_INPUT) if data is not None else []
    if len(flat) != count:
        raise TensorError(f"input {TEXT_INPUT!r}: data holds {len(flat)} elements; its shape says {count}")
    if not all(isinstance(t, str) for t in flat):
        raise TensorError(f"input {TEXT_INPUT!r}: BYTES data in JSON must be strings")
    for k, text in enumerate(flat):
        _checked(text.encode("utf-8", "surrogatepass"), k)
    return flat


def _binary_strings(binary: memoryview, size: Any, count: int) -> list[str]:
    if not isinstance(size, int) or isinstance(size, bool) or size != len(binary):
        raise TensorError(f"input {TEXT_INPUT!r}: binary_data_size {size!r:.20} must be the {len(binary)} bytes "
                          "that follow the JSON")  # fmt: skip
    texts, offset = [], 0
    for k in range(count):
        if offset + 4 > size:
            raise TensorError(f"input {TEXT_INPUT!r}: binary data ends before element {k}'s length")
        (length,) = struct.unpack_from("<I", binary, offset)
        offset += 4
        if offset + length > size:
            raise TensorError(f"input {TEXT_INPUT!r}: element {k} says {length} bytes; {size - offset} are left")
        texts.append(_decoded(bytes(binary[offset : offset + length]), k))
        offset += length
    if offset != size:
        raise TensorError(f"input {TEXT_INPUT!r}: {size - offset} bytes follow its {count} elements")
    return texts


def _checked(raw: bytes, k: int) -> bytes:
    if not raw:
        raise TensorError(f"input {TEXT_INPUT!r}: element {k} is empty")
    if len(raw) > MAX_TEXT_BYTES:
        raise TensorError(f"input {TEXT_INPUT!r}: element {k} is {len(raw)} bytes; at most {MAX_TEXT_BYTES}")
    return raw


def _decoded(raw: bytes, k: int) -> str:
    try:
        return _checked(raw, k).decode("utf-8")
    except UnicodeDecodeError:
        raise TensorError(f"input {TEXT_INPUT!r}: element {k} is not UTF-8") from None
