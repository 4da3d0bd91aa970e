"""The queue codec: requests and results survive bytes exactly, and hostile bytes raise ValueError."""

from __future__ import annotations

import io
import json
import struct

import ml_dtypes
import numpy as np
import pytest

from luminal.scheduler.queues.codec import MAGIC, decode_request, decode_result, encode_request, encode_result
from luminal.scheduler.work import EXPIRED, OK, InferenceRequest, InferenceResult

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32]
DTYPES += [np.int64, np.uint64, np.bool_]
SHAPES = [(), (0,), (3, 0, 2), (5,), (2, 3, 4)]


def sample(dtype, shape, seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal(shape) * 100
    return (values > 0) if dtype is np.bool_ else values.astype(dtype)


def assert_same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()  # bit for bit: a float round trip must not go through another dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_request_round_trips_every_dtype_and_shape(dtype, shape):
    inputs = {"a": sample(dtype, shape), "b": sample(dtype, shape, seed=1)}
    request = InferenceRequest(3, 9, inputs, priority=2, deadline=1234.5)
    decoded = decode_request(encode_request(request))
    assert (decoded.deployment_id, decoded.tenant_id, decoded.priority) == (3, 9, 2)
    assert (decoded.id, decoded.deadline, decoded.enqueued_at) == (request.id, 1234.5, request.enqueued_at)
    assert decoded.inputs.keys() == inputs.keys()
    for name in inputs:
        assert_same(decoded.inputs[name], inputs[name])


def test_non_contiguous_and_big_endian_arrays_keep_their_values():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    inputs = {"t": base.T, "s": base[:, ::2], "be": base.astype(">f4")}
    decoded = decode_request(encode_request(InferenceRequest(1, 1, inputs))).inputs
    np.testing.assert_array_equal(decoded["t"], base.T)
    np.testing.assert_array_equal(decoded["s"], base[:, ::2])
    assert decoded["be"].dtype == np.float32
    np.testing.assert_array_equal(decoded["be"], base)
    decoded["t"][0, 0] = -1  # decoded arrays own writable memory
    assert base[0, 0] == 0


def test_result_round_trips_with_outputs_and_without():
    result = InferenceResult("r1", OK, {"y": sample(ml_dtypes.bfloat16, (2, 2))}, batch_id="b", batch_size=3,
                             batch_leader=True, queue_seconds=0.25, compute_seconds=1.5, billed_seconds=0.5,
                             worker_id="w")  # fmt: skip
    decoded = decode_result(encode_result(result))
    assert_same(decoded.outputs["y"], result.outputs["y"])
    decoded.outputs = result.outputs = None
    assert decoded == result
    failed = InferenceResult("r2", EXPIRED, error="too late")
    assert decode_result(encode_result(failed)) == failed
    assert decode_result(encode_result(InferenceResult("r3", OK, outputs={}))).outputs == {}


def test_unsupported_dtypes_are_refused_when_encoding():
    for array in [np.array(["text"], dtype=object), np.zeros(2, np.complex128), np.zeros(2, np.complex64)]:
        with pytest.raises(ValueError, match="no luminal program takes"):
            encode_request(InferenceRequest(1, 1, {"x": array}))


def test_truncated_bytes_are_refused_at_every_length():
    data = encode_request(InferenceRequest(1, 1, {"x": sample(np.float32, (3, 4)), "m": sample(np.bool_, (2,))}))
    for cut in range(len(data)):
        with pytest.raises(ValueError, match="malformed"):
            decode_request(data[:cut])
    with pytest.raises(ValueError, match="unexpected bytes"):
        decode_request(data + b"\0")


@pytest.mark.parametrize(
    "garbage",
    [b"", b"\x00" * 64, b"GIF89a....", MAGIC + b"\xff\xff\xff\xff", MAGIC + struct.pack(">I", 4) + b"\xff\xfe{["],
)
def test_garbage_is_refused(garbage):
    with pytest.raises(ValueError, match="malformed"):
        decode_request(garbage)


def forge(header: dict, *blobs: bytes) -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + struct.pack(">I", len(text)) + text + b"".join(blobs)


def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


HEADER = {"kind": "request", "deployment_id": 1, "tenant_id": 1, "priority": 5, "deadline": None, "id": "r",
          "enqueued_at": 0.0}  # fmt: skip


def test_pickled_object_arrays_are_never_loaded():
    blob = npy(np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for dtype in ["float32", "object"]:
        data = forge(
            {**HEADER, "arrays": [{"group": "inputs", "name": "x", "dtype": dtype, "nbytes": len(blob)}]}, blob
        )
        with pytest.raises(ValueError, match="malformed"):
            decode_request(data)


def test_forged_shapes_cannot_claim_more_data_than_sent():
    sent = np.zeros(4, np.float32).tobytes()  # claims 4 TB, carries 16 bytes
    entry = {"group": "inputs", "name": "x", "dtype": "float32", "shape": [10**12], "nbytes": len(sent)}
    with pytest.raises(ValueError, match="needs 4000000000000 bytes, got 16"):
        decode_request(forge({**HEADER, "arrays": [entry]}, sent))


@pytest.mark.parametrize("shape", [[-1, 4], [2.0, 2], [True], "4", None, [1] * 65])
def test_forged_shapes_that_are_no_shape_are_refused(shape):
    entry = {"group": "inputs", "name": "x", "dtype": "float32", "shape": shape, "nbytes": 16}
    with pytest.raises(ValueError, match="malformed"):
        decode_request(forge({**HEADER, "arrays": [entry]}, bytes(16)))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"kind": "result"}, "does not describe a request"),
        ({"priority": 11}, "priority 11"),
        ({"deployment_id": "1"}, "'deployment_id' should be int"),
        ({"tenant_id": True}, "'tenant_id' should be int"),
        ({"deadline": "soon"}, "'deadline' should be float"),
        ({"arrays": {}}, "'arrays' should be list"),
        ({"arrays": [{"group": "outputs", "name": "x", "dtype": "float32", "nbytes": 0}]}, "unexpected"),
        ({"arrays": [{"group": "inputs", "name": "x", "dtype": "complex64", "nbytes": 0}]}, "unsupported dtype"),
        ({"trace": "00-ab-cd-01"}, "'trace' should be an object"),
    ],
)
def test_malformed_headers_name_the_problem(change, message):
    fields = {**HEADER, "arrays": []}
    fields.update(change)
    with pytest.raises(ValueError, match=message):
        decode_request(forge(fields))
    del fields["id"]
    with pytest.raises(ValueError, match="malformed"):
        decode_request(forge(fields))


def test_nan_in_header_is_refused():
    text = json.dumps({**HEADER, "arrays": []}).replace('"enqueued_at": 0.0', '"enqueued_at": NaN').encode()
    with pytest.raises(ValueError, match="NaN"):
        decode_request(MAGIC + struct.pack(">I", len(text)) + text)


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_trace_context_travels_with_the_request():
    request = InferenceRequest(3, 9, {}, trace={"traceparent": TRACEPARENT, "tracestate": "vendor=1"})
    assert decode_request(encode_request(request)).trace == request.trace
    assert decode_request(encode_request(InferenceRequest(3, 9, {}))).trace is None


def test_trace_context_is_optional_and_keeps_only_w3c_entries():
    """A message from a gateway that does not trace has no field: not traced. Anything but the W3C entries, or an
    oversized value, is dropped rather than handed to the propagator."""
    assert decode_request(forge({**HEADER, "arrays": []})).trace is None
    forged = {"traceparent": TRACEPARENT, "cookie": "secret", "tracestate": "x" * 5000}
    assert decode_request(forge({**HEADER, "arrays": [], "trace": forged})).trace == {"traceparent": TRACEPARENT}
    assert decode_request(forge({**HEADER, "arrays": [], "trace": {"tracestate": 5}})).trace is None
