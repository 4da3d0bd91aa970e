"""ModelInferRequest tensors decoded with REST's checks, each refusal naming the problem; answers raw or typed."""

import numpy as np
import pytest

from luminal.gateway.oip_grpc import messages as pb
from luminal.gateway.oip_grpc.tensors import model_infer_response, parse_model_infer
from luminal.gateway.tensor_codec import TensorError


def _signature(dtype: str) -> dict:
    return {
        "inputs": [{"name": "x", "dtype": dtype, "shape": ["batch", 2]}],
        "outputs": [{"name": "y", "dtype": dtype, "shape": ["batch", 2]}],
    }


def _typed(datatype: str, field: str, values: list, shape=(1, 2)) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    getattr(request.inputs.add(name="x", datatype=datatype, shape=shape).contents, field).extend(values)
    return request


@pytest.mark.parametrize(
    "dtype, datatype, field, values",
    [
        ("float32", "FP32", "fp32_contents", [1.5, -2.0]),
        ("int8", "INT8", "int_contents", [-128, 127]),
        ("uint16", "UINT16", "uint_contents", [0, 65535]),
        ("int64", "INT64", "int64_contents", [-(2**40), 2**40]),
        ("bool", "BOOL", "bool_contents", [True, False]),
    ],
)
def test_typed_contents_decode_to_the_models_dtype_and_answer_typed(dtype, datatype, field, values):
    parsed = parse_model_infer(_typed(datatype, field, values), _signature(dtype))
    assert parsed.inputs["x"].tolist() == [values] and parsed.inputs["x"].dtype == np.dtype(dtype)
    answer = model_infer_response("m", "1", parsed, {"y": parsed.inputs["x"]}, _signature(dtype), typed=True)
    assert list(getattr(answer.outputs[0].contents, field)) == values and not answer.raw_output_contents


def test_raw_contents_decode_and_answer_raw():
    request = pb.ModelInferRequest(model_name="m", id="r")
    request.inputs.add(name="x", datatype="FP16", shape=[1, 2])
    request.raw_input_contents.append(np.array([[1, 2]], np.float16).tobytes())
    parsed = parse_model_infer(request, _signature("float16"))
    answer = model_infer_response("m", "1", parsed, {"y": parsed.inputs["x"] * 2}, _signature("float16"), typed=True)
    assert np.frombuffer(answer.raw_output_contents[0], np.float16).tolist() == [2, 4]  # FP16 has no typed field
    assert answer.id == "r" and list(answer.outputs[0].shape) == [1, 2]


def _raw_request(data: bytes, entries: int = 1) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    request.raw_input_contents.extend([data] * entries)
    return request


@pytest.mark.parametrize(
    "request_, dtype, message",
    [
        (_typed("INT8", "int_contents", [1, 300]), "int8", "outside INT8's range"),
        (_typed("FP32", "fp32_contents", [1.0]), "float32", "needs 2 values, fp32_contents holds 1"),
        (_typed("FP16", "fp32_contents", [1.0, 2.0]), "float16", "FP16 data must be sent in raw_input_contents"),
        (_raw_request(b"\0" * 4), "float32", "is 8 bytes, raw contents 4"),
        (_raw_request(b"\0" * 8, entries=2), "float32", "raw_input_contents has 2 entries for 1 inputs"),
        (_typed("FP64", "fp64_contents", [1.0, 2.0]), "float32", "has datatype 'FP64'; the model takes FP32"),
        (pb.ModelInferRequest(model_name="m"), "float32", "at least one input"),
    ],
)
def test_bad_tensors_are_refused_naming_the_problem(request_, dtype, message):
    with pytest.raises(TensorError, match=message):
        parse_model_infer(request_, _signature(dtype))


def test_unknown_outputs_and_bad_priorities_are_refused():
    request = _typed("FP32", "fp32_contents", [1.0, 2.0])
    request.outputs.add(name="nope")
    with pytest.raises(TensorError, match="unknown output 'nope'"):
        parse_model_infer(request, _signature("float32"))
    request = _typed("FP32", "fp32_contents", [1.0, 2.0])
    request.parameters["priority"].uint64_param = 11
    with pytest.raises(TensorError, match="priority"):
        parse_model_infer(request, _signature("float32"))
