"""Sequence requests and events to JSON and back (scheduler/sequences/codec.py): every SamplingParams field
crosses, from its type hints, including fields added later (a dict keyed by token id, a nested union); what does
not fit, or a field this side does not know, is refused naming it, never half-read."""

from __future__ import annotations

import dataclasses
import json

import pytest

from luminal.scheduler.generation.logprobs import TokenLogprob
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account, Delta, Expired, Failed, Started
from luminal.scheduler.sequences import codec
from luminal.scheduler.sequences.json_values import from_json, to_json
from luminal.scheduler.sequences.request import SequenceRequest


def request(**params) -> SequenceRequest:
    sampling = SamplingParams(**{"max_tokens": 9, **params})
    return SequenceRequest(Account("r1", 4, 2, "l4", "m", 3), (1, 2, 3), sampling, 2, 1.5, 1700000000.25)


@pytest.mark.parametrize(
    "params",
    [{}, {"temperature": 0.0, "top_k": 5, "top_p": 0.5, "seed": 7}, {"stop": ("a", "bc"), "stop_token_ids": (3, 4)},
     {"ignore_eos": True, "logprobs": 0}, {"logprobs": 20}, {"lora": "terse"}],
)  # fmt: skip
def test_requests_cross_whole(params):
    sent = request(**params)
    assert codec.decode_request(codec.encode_request(sent)) == sent


@pytest.mark.parametrize(
    "event",
    [Delta("hé", 5, None), Delta("", 2, "stop", TokenLogprob(2, -0.75, ((2, -0.75), (9, -1.5)))),
     Failed("decode step failed: boom"), Expired("it waited 3.000 s"), Started("d4-abc"),
     Started("d4-abc", 1765080000.1234567)],
)  # fmt: skip
def test_events_cross_whole(event):
    decoded = codec.decode_event(codec.encode_event(event))
    assert decoded == event and type(decoded) is type(event)


@dataclasses.dataclass(frozen=True)
class LaterParams:
    """Fields of the kinds engineers add to SamplingParams: a logit bias by token id, a schema as a string."""

    max_tokens: int
    logit_bias: dict[int, float] | None = None
    response_format: str | None = None
    allowed: tuple[int, ...] = ()


def test_fields_added_later_cross_by_their_type_hints():
    sent = LaterParams(3, {50256: -100.0, 7: 2}, '{"type": "object"}', (1, 2))
    back = from_json(LaterParams, json.loads(json.dumps(to_json(sent))))
    assert back == sent and list(back.logit_bias) == [50256, 7]


@pytest.mark.parametrize(
    "tamper, words",
    [(lambda r: r["params"].update(max_tokens="9"), "params.max_tokens"),
     (lambda r: r["params"].update(grammar="x"), "has no field 'grammar'"),
     (lambda r: r["params"].update(temperature=5.0), "temperature must lie in [0, 2]"),
     (lambda r: r.update(prompt=[1, "2"]), "prompt[1]"),
     (lambda r: r["account"].update(tenant_id=None), "account.tenant_id")],
)  # fmt: skip
def test_a_request_that_does_not_fit_is_refused_naming_the_field(tamper, words):
    value = json.loads(codec.encode_request(request()))
    tamper(value)
    with pytest.raises(ValueError) as caught:
        codec.decode_request(json.dumps(value).encode())
    assert words in str(caught.value)


@pytest.mark.parametrize("data", [b"\xff", b"[1]", b'{"kind": "exec"}', b'{"kind": "delta", "text": 1}'])
def test_malformed_events_are_refused(data):
    with pytest.raises(ValueError):
        codec.decode_event(data)


def test_trace_context_crosses_and_is_optional():
    """The gateway span's W3C context crosses with the request; one sent without it (an untraced request, an
    older gateway) is not traced."""
    traced = dataclasses.replace(request(), trace={"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"})
    assert codec.decode_request(codec.encode_request(traced)) == traced
    untraced = json.loads(codec.encode_request(request()))
    del untraced["trace"]
    assert codec.decode_request(json.dumps(untraced).encode()).trace is None


def test_a_started_event_without_the_process_decodes_as_an_older_workers():
    """A worker from before Started named its process sends only its id: during an upgrade the gateway still reads
    it (and then asks only that some worker under the id lives)."""
    older = json.dumps({"kind": "started", "worker_id": "d4-abc"}).encode()
    assert codec.decode_event(older) == Started("d4-abc", None)
    with pytest.raises(ValueError, match="worker_started_at"):
        codec.decode_event(json.dumps({"kind": "started", "worker_id": "d4-abc", "worker_started_at": "x"}).encode())
