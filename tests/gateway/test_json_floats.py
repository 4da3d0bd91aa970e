"""Non-finite floats as JSON strings: responses written strictly, the names read back in requests (float tensors
only), the CLI's side of the protocol doing the same, and JSON responses that refuse a bare NaN."""

from __future__ import annotations

import datetime as dt
import json
import math

import numpy as np
import pytest
from fastapi.responses import JSONResponse

from luminal.cli.oip import decode_response, encode_request
from luminal.gateway.json_floats import strict_dumps, tensor_values
from luminal.gateway.prediction_schemas import PredictionPublic
from luminal.gateway.tensor_codec import InferRequest, TensorError, encode_infer_response, parse_infer_request
from luminal.store.tables import Prediction

SIG = {
    "inputs": [{"name": "x", "shape": [3], "dtype": "float32"}, {"name": "ids", "shape": [2], "dtype": "int64"}],
    "outputs": [{"name": "y", "shape": [3], "dtype": "float32"}, {"name": "h", "shape": [3], "dtype": "bfloat16"}],
}
SPECIAL = np.array([np.nan, np.inf, -np.inf], np.float32)


def strict_loads(text: bytes | str):
    """json.loads that refuses NaN, Infinity and -Infinity, as JavaScript's JSON.parse does."""

    def refuse(name: str):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def request(x_data, ids_data=(1, 2)) -> bytes:
    inputs = [
        {"name": "x", "shape": [3], "datatype": "FP32", "data": x_data},
        {"name": "ids", "shape": [2], "datatype": "INT64", "data": list(ids_data)},
    ]
    return json.dumps({"inputs": inputs}).encode()


def test_tensor_values_name_non_finite_floats_only():
    assert tensor_values(np.array([1.5, np.nan, np.inf, -np.inf])) == [1.5, "NaN", "Infinity", "-Infinity"]
    assert tensor_values(np.array([[1, 2]], np.int64)) == [1, 2]
    assert tensor_values(np.array([True])) == [True]


def test_strict_dumps_refuses_a_bare_nan():
    with pytest.raises(ValueError):
        strict_dumps({"x": math.nan})


@pytest.mark.parametrize("doc", [
    {"x": [0.1, 1e16, 1e-5, 5e-324, -0.0, 2**63 - 1, -(2**63)], "name": "e", "shape": [1, 7]},
    {"id": "null", "data": [None, "null", 1.5]},  # nulls that are not NaNs: written by the careful path
    {"data": np.random.default_rng(0).standard_normal(384).astype(np.float32).tolist()},
])  # fmt: skip
def test_strict_dumps_writes_what_json_reads_back_exactly(doc):
    text = strict_dumps(doc)
    assert json.loads(text) == doc
    assert b" " not in text  # compact


def test_strict_dumps_refuses_a_nan_beside_a_null():
    with pytest.raises(ValueError):
        strict_dumps({"a": None, "x": [1.0, math.inf]})


def test_every_json_response_refuses_a_bare_nan():
    # FastAPI's default response class: a route returning a raw NaN fails loudly instead of sending invalid JSON.
    with pytest.raises(ValueError):
        JSONResponse({"x": math.inf})


def test_responses_write_non_finite_values_as_strings():
    results = {"y": SPECIAL, "h": SPECIAL.astype("bfloat16")}
    payload, _ = encode_infer_response("m", "1", InferRequest(None, {}, ["y", "h"]), results, SIG)
    doc = strict_loads(payload)
    assert [o["data"] for o in doc["outputs"]] == [["NaN", "Infinity", "-Infinity"]] * 2


@pytest.mark.parametrize("data", [["NaN", "Infinity", "-Infinity"], [math.nan, math.inf, -math.inf]])
def test_float_inputs_take_the_names_and_bare_constants(data):
    parsed = parse_infer_request(request(data), None, SIG)
    np.testing.assert_array_equal(parsed.inputs["x"], SPECIAL)


def test_a_round_trip_keeps_every_value():
    values = np.array([np.nan, -0.0, np.inf], np.float32)
    parsed = parse_infer_request(request(tensor_values(values)), None, SIG)
    np.testing.assert_array_equal(parsed.inputs["x"], values)
    assert math.copysign(1, parsed.inputs["x"][1]) == -1


@pytest.mark.parametrize("bad", ["NaN", "Infinity", math.nan])
def test_integer_inputs_refuse_non_finite_values_by_name(bad):
    with pytest.raises(TensorError, match="INT64 data holds NaN or infinity, which only float tensors take"):
        parse_infer_request(request([1, 2, 3], (1, bad)), None, SIG)


@pytest.mark.parametrize("bad", ["nan", "inf", "1.5", True, None])
def test_other_strings_and_values_stay_refused(bad):
    with pytest.raises(TensorError, match="not FP32"):
        parse_infer_request(request([1, 2, bad]), None, SIG)


def test_a_long_request_id_is_refused():
    doc = json.loads(request([1, 2, 3]))
    doc["id"] = "r" * 257
    with pytest.raises(TensorError, match="id must be a string of at most 256 characters"):
        parse_infer_request(json.dumps(doc).encode(), None, SIG)


def test_the_cli_sends_and_reads_the_string_forms():
    sent = encode_request({"x": ("FP32", SPECIAL)}, binary=False)
    assert strict_loads(sent.body)["inputs"][0]["data"] == ["NaN", "Infinity", "-Infinity"]
    answer = {"outputs": [{"name": "y", "datatype": "FP32", "shape": [3], "data": ["NaN", "Infinity", "-Infinity"]}]}
    datatype, array = decode_response(json.dumps(answer).encode(), None)["y"]
    assert datatype == "FP32"
    np.testing.assert_array_equal(array, SPECIAL)


def test_a_document_stored_with_bare_constants_answers_with_the_strings():
    # Written before this format: the poll and the webhook must still be strict JSON.
    now = dt.datetime.now(dt.UTC)
    row = Prediction(id="p", model="m", version=1, status="succeeded", created_at=now, billed_seconds=0.0)
    stored = '{"outputs": [{"name": "y", "data": [NaN, Infinity, -Infinity, 1.5]}]}'
    public = PredictionPublic.of(row, stored)
    assert public.output["outputs"][0]["data"] == ["NaN", "Infinity", "-Infinity", 1.5]
    strict_loads(JSONResponse(public.model_dump(mode="json")).body)
