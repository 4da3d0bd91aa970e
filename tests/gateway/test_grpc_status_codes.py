"""The gateway's refusals under their gRPC codes, and a call's gRPC deadline bounding its queue wait."""

import grpc
import numpy as np
import pytest

from luminal.gateway.errors import ApiError
from luminal.gateway.oip_grpc import messages as pb
from luminal.gateway.oip_grpc.service import _decoded_within
from luminal.gateway.oip_grpc.status_codes import grpc_status
from luminal.gateway.tensor_codec import TensorError
from luminal.scheduler.queues.base import QueueFull
from luminal.store.errors import NotFound

SIGNATURE = {
    "inputs": [{"name": "x", "dtype": "float32", "shape": ["batch", 2]}],
    "outputs": [{"name": "y", "dtype": "float32", "shape": ["batch", 2]}],
}


@pytest.mark.parametrize(
    "error, code",
    [
        (ApiError(401, "missing Authorization header"), grpc.StatusCode.UNAUTHENTICATED),
        (ApiError(403, "tenant 'a' is suspended"), grpc.StatusCode.PERMISSION_DENIED),
        (ApiError(429, "over its quota"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (ApiError(504, "expired before it ran"), grpc.StatusCode.DEADLINE_EXCEEDED),
        (ApiError(503, "unschedulable"), grpc.StatusCode.UNAVAILABLE),
        (NotFound("model 'm' not found"), grpc.StatusCode.NOT_FOUND),
        (TensorError("unknown input 'z'"), grpc.StatusCode.INVALID_ARGUMENT),
        (QueueFull(7, 512, 1.0), grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
)
def test_each_refusal_keeps_rests_message_under_its_code(error, code):
    assert grpc_status(error) == (code, str(error) if not isinstance(error, ApiError) else error.message)


def test_our_own_bugs_are_internal_without_details():
    assert grpc_status(RuntimeError("secret state")) == (grpc.StatusCode.INTERNAL, "internal error")


def _request(**parameters) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    request.raw_input_contents.append(np.ones(2, np.float32).tobytes())
    for key, value in parameters.items():
        request.parameters[key].int64_param = value
    return request


def test_the_calls_deadline_bounds_the_wait_unless_the_timeout_is_shorter():
    assert _decoded_within(_request(), SIGNATURE, None).timeout_us is None
    assert _decoded_within(_request(), SIGNATURE, 0.25).timeout_us == 250_000
    assert _decoded_within(_request(timeout=1000), SIGNATURE, 0.25).timeout_us == 1000
    assert _decoded_within(_request(timeout=10**6, priority=2), SIGNATURE, 0.25).timeout_us == 250_000
    assert _decoded_within(_request(priority=2), SIGNATURE, None).priority == 2
