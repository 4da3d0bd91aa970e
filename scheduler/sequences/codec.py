"""Sequence requests and events as JSON bytes, for transports that cross processes (Redis). Never pickle: what a
shared Redis holds is read as hostile, so decoding checks every field's type (json_values.py) and raises
ValueError naming what is wrong."""

from __future__ import annotations

import json
from typing import Any

from luminal.scheduler.generation.stream import Delta, Event, Expired, Failed, Started
from luminal.scheduler.sequences.json_values import from_json, to_json
from luminal.scheduler.sequences.request import SequenceRequest, WorkerLoad

MAX_BYTES = 16 << 20  # a request holds a prompt's token ids: far less than this
EVENT_KINDS: dict[str, type] = {"delta": Delta, "expired": Expired, "failed": Failed, "started": Started}
_KIND_OF = {kind: name for name, kind in EVENT_KINDS.items()}


def encode_request(request: SequenceRequest) -> bytes:
    return _dumps(to_json(request))


def decode_request(data: bytes) -> SequenceRequest:
    return from_json(SequenceRequest, _loads(data), "sequence request")


def encode_load(load: WorkerLoad) -> bytes:
    return _dumps(to_json(load))


def decode_load(data: bytes) -> WorkerLoad:
    return from_json(WorkerLoad, _loads(data), "worker load")


def encode_event(event: Event) -> bytes:
    return _dumps({"kind": _KIND_OF[type(event)], **to_json(event)})


def decode_event(data: bytes) -> Event:
    value = _loads(data)
    if not isinstance(value, dict) or value.get("kind") not in EVENT_KINDS:
        raise ValueError(f"sequence event: {str(value)[:60]!r} names no kind of {sorted(EVENT_KINDS)}")
    kind = EVENT_KINDS[value.pop("kind")]
    return from_json(kind, value, f"{kind.__name__} event")


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    if len(data) > MAX_BYTES:
        raise ValueError(f"a sequence message of {len(data)} bytes is over the limit of {MAX_BYTES}")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"a sequence message is not JSON: {e}") from None
