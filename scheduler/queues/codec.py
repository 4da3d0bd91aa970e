"""InferenceRequest / InferenceResult to bytes and back, for queues that cross a process boundary (Redis).

Layout: the magic `LMQ2`, the JSON header's length (4 bytes, big-endian), the JSON header (the scalar fields,
and for each array its group, name, dtype, shape and byte length), then each array's raw bytes, C order,
little-endian. Raw bytes rather than .npy: numpy's .npy header is parsed with `ast.literal_eval`, which cost more
than the rest of a small request's decoding.

Never pickle: a queue is shared by every gateway replica and worker, so bytes read from it are treated as
hostile. Decoding takes only the dtypes luminal programs use (no object dtypes), checks each array's byte
length against its shape before touching the data (a forged shape cannot make it allocate), and raises
ValueError with the reason for anything malformed.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from luminal import dtypes as dt
from luminal.scheduler.tracing import carrier_of
from luminal.scheduler.work import HIGHEST_PRIORITY, LOWEST_PRIORITY, InferenceRequest, InferenceResult

MAGIC = b"LMQ2"
_LENGTH = struct.Struct(">I")
MAX_HEADER_BYTES = 1 << 20  # the JSON header holds names and scalars only; a bigger one is not ours
MAX_DIMS = 64

# The dtypes luminal programs take and return, by name. bfloat16 travels as its bits (uint16), so its bytes are
# ordered like any 16-bit integer's.
DTYPES: dict[str, np.dtype] = {d.name: d.np for d in dt.ALL}
_CARRIER = {"bfloat16": np.dtype(np.uint16)}  # the dtype written to .npy when it differs from the array's
_DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


# --- encoding ---


def encode_request(request: InferenceRequest) -> bytes:
    header = {
        "kind": "request",
        "deployment_id": request.deployment_id,
        "tenant_id": request.tenant_id,
        "priority": request.priority,
        "deadline": request.deadline,
        "id": request.id,
        "enqueued_at": request.enqueued_at,
    }
    if request.trace:  # absent when untraced: the header stays as small as before
        header["trace"] = request.trace
    return _pack(header, {"inputs": request.inputs})


def encode_result(result: InferenceResult) -> bytes:
    header = {
        "kind": "result",
        "request_id": result.request_id,
        "status": result.status,
        "error": result.error,
        "has_outputs": result.outputs is not None,
        "batch_id": result.batch_id,
        "batch_size": result.batch_size,
        "batch_leader": result.batch_leader,
        "queue_seconds": result.queue_seconds,
        "compute_seconds": result.compute_seconds,
        "billed_seconds": result.billed_seconds,
        "worker_id": result.worker_id,
    }
    return _pack(header, {"outputs": result.outputs or {}})


def _pack(header: dict[str, Any], groups: dict[str, dict[str, np.ndarray]]) -> bytes:
    blobs, entries = [], []
    for group, arrays in groups.items():
        for name, array in arrays.items():
            array = np.asarray(array)
            dtype_name = _dtype_name(name, array)
            carrier = _CARRIER.get(dtype_name)
            if carrier is not None:
                array = array.view(carrier)
            blob = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
            entries.append({"group": group, "name": name, "dtype": dtype_name, "shape": list(array.shape),
                            "nbytes": len(blob)})  # fmt: skip
            blobs.append(blob)
    # allow_nan=False: a NaN or infinite time is a bug upstream, better caught here than on the other side.
    text = json.dumps({**header, "arrays": entries}, allow_nan=False).encode()
    return b"".join([MAGIC, _LENGTH.pack(len(text)), text, *blobs])


def _dtype_name(name: str, array: np.ndarray) -> str:
    dtype = array.dtype.newbyteorder("=") if not array.dtype.isnative else array.dtype
    if dtype not in _DTYPE_NAMES:
        raise ValueError(
            f"array {name!r} has dtype {array.dtype}, which no luminal program takes: use {sorted(DTYPES)}"
        )
    return _DTYPE_NAMES[dtype]


# --- decoding ---


def decode_request(data: bytes) -> InferenceRequest:
    header, groups = _unpack(data, "request", ["inputs"])
    priority = _field(header, "priority", int)
    if not HIGHEST_PRIORITY <= priority <= LOWEST_PRIORITY:
        raise ValueError(f"malformed request: priority {priority} is outside {HIGHEST_PRIORITY}..{LOWEST_PRIORITY}")
    return InferenceRequest(
        deployment_id=_field(header, "deployment_id", int),
        tenant_id=_field(header, "tenant_id", int),
        inputs=groups["inputs"],
        priority=priority,
        deadline=_field(header, "deadline", float, optional=True),
        id=_field(header, "id", str),
        enqueued_at=_field(header, "enqueued_at", float),
        trace=_trace(header),
    )


def _trace(header: dict) -> dict[str, str] | None:
    """The request's W3C trace context; a message without one (an older gateway's) is simply not traced."""
    carrier = header.get("trace")
    if carrier is None:
        return None
    if not isinstance(carrier, dict):
        raise ValueError(f"malformed header: 'trace' should be an object, got {type(carrier).__name__}")
    return carrier_of(carrier) or None


def decode_result(data: bytes) -> InferenceResult:
    header, groups = _unpack(data, "result", ["outputs"])
    return InferenceResult(
        request_id=_field(header, "request_id", str),
        status=_field(header, "status", int),
        outputs=groups["outputs"] if _field(header, "has_outputs", bool) else None,
        error=_field(header, "error", str, optional=True),
        batch_id=_field(header, "batch_id", str, optional=True),
        batch_size=_field(header, "batch_size", int),
        batch_leader=_field(header, "batch_leader", bool),
        queue_seconds=_field(header, "queue_seconds", float),
        compute_seconds=_field(header, "compute_seconds", float),
        billed_seconds=_field(header, "billed_seconds", float),
        worker_id=_field(header, "worker_id", str, optional=True),
    )


def _unpack(data: bytes, kind: str, group_names: list[str]) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ValueError(f"malformed {kind}: expected bytes, got {type(data).__name__}")
    data = memoryview(data).cast("B")
    prefix = len(MAGIC) + _LENGTH.size
    if len(data) < prefix or bytes(data[: len(MAGIC)]) != MAGIC:
        raise ValueError(f"malformed {kind}: the bytes do not start with {MAGIC!r}")
    (length,) = _LENGTH.unpack(data[len(MAGIC) : prefix])
    if length > MAX_HEADER_BYTES or prefix + length > len(data):
        raise ValueError(f"malformed {kind}: header length {length} exceeds the {len(data)} bytes given")
    try:
        header = json.loads(bytes(data[prefix : prefix + length]), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"malformed {kind}: the header is not valid JSON ({e})") from None
    if not isinstance(header, dict) or header.get("kind") != kind:
        raise ValueError(f"malformed {kind}: the header does not describe a {kind}")
    groups: dict[str, dict[str, np.ndarray]] = {name: {} for name in group_names}
    offset = prefix + length
    for entry in _field(header, "arrays", list):
        if not isinstance(entry, dict):
            raise ValueError(f"malformed {kind}: an array entry is not an object")
        group, name = _field(entry, "group", str), _field(entry, "name", str)
        dtype_name, nbytes = _field(entry, "dtype", str), _field(entry, "nbytes", int)
        if group not in groups or name in groups[group]:
            raise ValueError(f"malformed {kind}: array {group}/{name} is unexpected or repeated")
        if dtype_name not in DTYPES:
            raise ValueError(f"malformed {kind}: array {name!r} has unsupported dtype {dtype_name!r}")
        if nbytes < 0 or offset + nbytes > len(data):
            raise ValueError(f"malformed {kind}: array {name!r} is truncated")
        shape = _shape(entry, name)
        groups[group][name] = _read_array(data[offset : offset + nbytes], name, dtype_name, shape)
        offset += nbytes
    if offset != len(data):
        raise ValueError(f"malformed {kind}: {len(data) - offset} unexpected bytes after the last array")
    return header, groups


def _shape(entry: dict, name: str) -> tuple[int, ...]:
    shape = _field(entry, "shape", list)
    if len(shape) > MAX_DIMS or not all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in shape):
        raise ValueError(f"malformed array {name!r}: shape {shape!r:.200} is not a list of extents >= 0")
    return tuple(shape)


def _read_array(blob: memoryview, name: str, dtype_name: str, shape: tuple[int, ...]) -> np.ndarray:
    native = _CARRIER.get(dtype_name, DTYPES[dtype_name])
    count = math.prod(shape)
    if len(blob) != count * native.itemsize:
        raise ValueError(
            f"malformed array {name!r}: shape {shape} needs {count * native.itemsize} bytes, got {len(blob)}"
        )
    # astype copies: the array owns writable memory and does not pin the whole message.
    array = np.frombuffer(blob, dtype=native.newbyteorder("<"), count=count).reshape(shape).astype(native)
    return array.view(DTYPES[dtype_name]) if dtype_name in _CARRIER else array


def _reject_constant(token: str) -> None:
    raise ValueError(f"malformed header: {token} is not a valid number here")


def _field(header: dict, key: str, kind: type, optional: bool = False) -> Any:
    if key not in header:
        raise ValueError(f"malformed header: {key!r} is missing")
    value = header[key]
    if value is None and optional:
        return None
    # bool is an int to Python but never a valid count or id here; an int is a valid float (JSON writes 3.0 as 3.0,
    # but another writer may not).
    ok = isinstance(value, bool) if kind is bool else isinstance(value, kind) and not isinstance(value, bool)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise ValueError(f"malformed header: {key!r} should be {kind.__name__}, got {type(value).__name__}")
    return value
