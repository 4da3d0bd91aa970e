"""The OIP tensor codec on its own: JSON and binary inputs, the checks on hostile bodies, binary outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from luminal.gateway.tensor_codec import InferRequest, TensorError, encode_infer_response, parse_infer_request

SIG = {
    "inputs": [
        {"name": "x", "shape": [["var", "batch", 1, 64], 2], "dtype": "float32"},
        {"name": "ids", "shape": [3], "dtype": "int64"},
    ],
    "outputs": [{"name": "y", "shape": [2], "dtype": "float32"}, {"name": "mask", "shape": [2], "dtype": "bool"}],
}


def body(doc: dict, *blobs: bytes) -> tuple[bytes, str | None]:
    header = json.dumps(doc).encode()
    return header + b"".join(blobs), (str(len(header)) if blobs else None)


def inputs(x=None, ids=None) -> list[dict]:
    x = x or {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [[1.5, 2]]}
    ids = ids or {"name": "ids", "shape": [3], "datatype": "INT64", "data": [1, 2, 3]}
    return [x, ids]


def test_json_tensors_nested_or_flat():
    req = parse_infer_request(*body({"id": "r1", "inputs": inputs()}), SIG)
    assert req.id == "r1" and req.outputs == ["y", "mask"] and not req.binary_outputs
    np.testing.assert_array_equal(req.inputs["x"], np.array([[1.5, 2]], np.float32))
    assert req.inputs["x"].dtype == np.float32 and req.inputs["ids"].dtype == np.int64


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "uint16", "uint32", "uint64"])
def test_every_integer_type_in_json_and_binary(dtype):
    """Each luminal integer type has its OIP name; JSON values outside the type's range are a named 400."""
    name = dtype.upper()
    sig = {
        "inputs": [{"name": "q", "shape": [2], "dtype": dtype}],
        "outputs": [{"name": "q", "shape": [2], "dtype": dtype}],
    }
    top = int(np.iinfo(dtype).max)
    req = parse_infer_request(*body({"inputs": [{"name": "q", "shape": [2], "datatype": name, "data": [top, 0]}]}), sig)
    assert req.inputs["q"].dtype == np.dtype(dtype) and req.inputs["q"].tolist() == [top, 0]
    blob = np.array([top, 1], dtype).tobytes()
    doc = {"inputs": [{"name": "q", "shape": [2], "datatype": name, "parameters": {"binary_data_size": len(blob)}}]}
    assert parse_infer_request(*body(doc, blob), sig).inputs["q"].tolist() == [top, 1]
    with pytest.raises(TensorError, match="input 'q'"):
        parse_infer_request(
            *body({"inputs": [{"name": "q", "shape": [2], "datatype": name, "data": [top + 1, 0]}]}), sig
        )
    payload, _ = encode_infer_response("m", "1", InferRequest(None, {}, ["q"]), {"q": req.inputs["q"]}, sig)
    assert json.loads(payload)["outputs"][0] == {"name": "q", "datatype": name, "shape": [2], "data": [top, 0]}


def test_scheduling_parameters_as_triton_names_them():
    plain = parse_infer_request(*body({"inputs": inputs()}), SIG)
    assert plain.priority == 0 and plain.timeout_us is None
    doc = {"inputs": inputs(), "parameters": {"priority": 2, "timeout": 1500}}
    req = parse_infer_request(*body(doc), SIG)
    assert req.priority == 2 and req.timeout_us == 1500
    for params, message in [
        ({"priority": 11}, "priority must be"),
        ({"priority": True}, "priority must be"),
        ({"timeout": 0}, "timeout must be"),
        ({"timeout": 1.5}, "timeout must be"),
    ]:
        with pytest.raises(TensorError, match=message):
            parse_infer_request(*body({"inputs": inputs(), "parameters": params}), SIG)


def test_binary_tensors_follow_the_json_in_input_order():
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    ids = np.array([7, 8, 9], np.int64)
    doc = {
        "inputs": [
            {"name": "x", "shape": [3, 2], "datatype": "FP32", "parameters": {"binary_data_size": 24}},
            {"name": "ids", "shape": [3], "datatype": "INT64", "parameters": {"binary_data_size": 24}},
        ],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }
    req = parse_infer_request(*body(doc, x.tobytes(), ids.tobytes()), SIG)
    np.testing.assert_array_equal(req.inputs["x"], x)
    np.testing.assert_array_equal(req.inputs["ids"], ids)
    assert req.outputs == ["y"] and req.binary_outputs == {"y"}


@pytest.mark.parametrize(
    "raw,header,message",
    [
        (b"not json", None, "not valid JSON"),
        (b"[1, 2]", None, "JSON object"),
        (b'{"inputs": []}', None, "non-empty list"),
        (b"{}", "99", "outside the body"),
        (b"{}", "abc", "not an integer"),
        (b"[" * 100_000, None, "not valid JSON"),
    ],
)
def test_malformed_bodies(raw, header, message):
    with pytest.raises(TensorError, match=message):
        parse_infer_request(raw, header, SIG)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"name": "z"}, "unknown input 'z'"),
        ({"datatype": "FP64"}, "datatype 'FP64'; the model takes FP32"),
        ({"shape": [2, 2]}, "needs 4 values, data holds 2"),
        ({"shape": [-1, 2]}, "non-negative integers"),
        ({"data": [["a", "b"]]}, "not FP32"),
        ({"data": [[True, 1.0]]}, "not FP32"),
        ({"data": None, "parameters": {"binary_data_size": 8}}, "ends after 0 of its 8 bytes"),
        ({"parameters": {"binary_data_size": 3}}, "is 8 bytes, binary_data_size 3"),
    ],
)
def test_bad_tensors_are_named(change, message):
    x = {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [[1.5, 2]], **change}
    if x["data"] is None:
        del x["data"]
    with pytest.raises(TensorError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_infer_request(*body({"inputs": inputs(x=x)}), SIG)


def test_missing_duplicate_and_leftover():
    with pytest.raises(TensorError, match=r"missing input\(s\) \['ids'\]"):
        parse_infer_request(*body({"inputs": inputs()[:1]}), SIG)
    with pytest.raises(TensorError, match="given twice"):
        parse_infer_request(*body({"inputs": [*inputs(), inputs()[0]]}), SIG)
    with pytest.raises(TensorError, match="4 bytes of binary data"):
        parse_infer_request(*body({"inputs": inputs()}, b"\0\0\0\0"), SIG)
    with pytest.raises(TensorError, match="out of bounds|Python int too large|overflow"):
        ids = {"name": "ids", "shape": [3], "datatype": "INT64", "data": [1, 2, 2**70]}
        parse_infer_request(*body({"inputs": inputs(ids=ids)}), SIG)
    with pytest.raises(TensorError, match="unknown output 'nope'"):
        parse_infer_request(*body({"inputs": inputs(), "outputs": [{"name": "nope"}]}), SIG)


def test_response_json_and_binary_parts():
    results = {"y": np.array([0.5, 1.5], np.float32), "mask": np.array([True, False])}
    req = InferRequest("7", {}, ["y", "mask"], {"mask"})
    payload, json_length = encode_infer_response("m", "1", req, results, SIG)
    doc = json.loads(payload[:json_length])
    assert doc["id"] == "7" and doc["model_version"] == "1"
    assert doc["outputs"][0] == {"name": "y", "datatype": "FP32", "shape": [2], "data": [0.5, 1.5]}
    assert doc["outputs"][1]["parameters"] == {"binary_data_size": 2} and payload[json_length:] == b"\x01\x00"
    payload, json_length = encode_infer_response("m", "1", InferRequest(None, {}, ["y"]), results, SIG)
    assert json_length is None and json.loads(payload)["outputs"][0]["data"] == [0.5, 1.5]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
field_names = st.sampled_from(["name", "shape", "datatype", "data", "parameters", "binary_data_size", "x", "ids"])
loose_tensor = st.dictionaries(field_names, json_values | st.sampled_from(["x", "ids", "FP32", "INT64"]), max_size=5)
# Near-valid tensors reach the deeper checks (counts, binary sizes, element types).
small_ints = st.integers(-2, 40)
near_valid_tensor = st.fixed_dictionaries(
    {"name": st.sampled_from(["x", "ids"]), "datatype": st.sampled_from(["FP32", "INT64", "BOOL"])},
    optional={
        "shape": st.lists(small_ints, max_size=3),
        "data": st.lists(st.integers(-(2**65), 2**65) | st.floats() | st.booleans(), max_size=8) | json_values,
        "parameters": st.fixed_dictionaries({}, optional={"binary_data_size": small_ints, "x": json_values}),
    },
)
tensor_like = loose_tensor | near_valid_tensor


@settings(max_examples=200, deadline=None)
@given(
    doc=st.fixed_dictionaries({"inputs": st.lists(tensor_like, max_size=3)}, optional={"outputs": json_values}),
    blob=st.binary(max_size=32),
    header=st.none() | st.integers(-5, 400).map(str),
)
def test_hostile_bodies_raise_only_tensor_errors(doc, blob, header):
    """Whatever the JSON and bytes, parsing either succeeds or raises TensorError (a 400), never anything else."""
    raw = json.dumps(doc).encode() + blob
    try:
        parse_infer_request(raw, header, SIG)
    except TensorError:
        pass
