"""Constrained decoding without a model: sequences driven by random logits under a JSON schema write JSON that
validates (greedy and sampled) and end the token their grammar completes; unsupported schema keywords are refused
by name; logit_bias shifts the choice; sampling parameters survive a JSON round trip (as they will cross to a
worker process); a sequence with neither keeps the plain sampler."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import numpy as np
import pytest

from luminal.scheduler.generation.grammar import JSON_OBJECT, JSON_SCHEMA, GrammarError, Grammars, grammar_request
from luminal.scheduler.generation.logit_shaping import ShapedSampler
from luminal.scheduler.generation.sampling import Sampler, SamplingParams
from luminal.scheduler.generation.sequence import STOP, Sequence
from luminal.scheduler.generation.tokenizer import TextCodec
from tests.json_schemas import PERSON
from tests.scheduler.random_logits import driven, plain_codec

# PERSON with an array of short strings.
SCHEMA = {
    **PERSON,
    "properties": {
        **PERSON["properties"],
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
    },
    "required": [*PERSON["required"], "tags"],
}


@pytest.fixture(scope="module")
def codec() -> TextCodec:
    return plain_codec()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("seed", range(4))
def test_random_logits_under_a_schema_write_valid_json(codec, temperature, seed):
    params = SamplingParams(200, temperature, seed=seed, response_format=grammar_request(JSON_SCHEMA, SCHEMA))
    seq = driven(codec, params, seed)
    assert seq.finish_reason == STOP and len(seq.tokens) < 200  # ended by the grammar, not by max_tokens
    answer = json.loads(seq.text)
    jsonschema.validate(answer, SCHEMA)
    assert list(answer) == list(SCHEMA["properties"])  # in the schema's order
    unconstrained = driven(codec, dataclasses.replace(params, response_format=None, max_tokens=len(seq.tokens)), seed)
    with pytest.raises(json.JSONDecodeError):  # the same logits without the grammar are not JSON
        json.loads(unconstrained.text)


def test_no_bias_lets_a_forbidden_token_through(codec):
    """+100 on tokens the grammar never allows where they would be chosen: the mask still wins."""
    lifted = tuple((codec.tokenizer.token_to_id(t), 100.0) for t in ("x", "Ġthe", "}"))
    params = SamplingParams(200, 0.0, response_format=grammar_request(JSON_SCHEMA, SCHEMA), logit_bias=lifted)
    seq = driven(codec, params, 3)
    assert seq.finish_reason == STOP
    answer = json.loads(seq.text)
    jsonschema.validate(answer, SCHEMA)
    assert answer["name"] and set(answer["name"]) <= set("x the}")  # where the grammar allows them, they win


def test_json_object_and_the_stop_string_together(codec):
    """A stop string cuts a constrained answer as it cuts a free one: just before the stop string."""
    params = SamplingParams(200, 0.0, response_format=grammar_request(JSON_OBJECT))
    answers = {seed: driven(codec, params, seed).text for seed in range(10)}
    seed, whole = next((seed, text) for seed, text in answers.items() if ":" in text)  # not every one is "{}"
    assert isinstance(json.loads(whole), dict)
    cut = driven(codec, dataclasses.replace(params, stop=(":",)), seed)
    assert cut.finish_reason == STOP and cut.text == whole[: whole.index(":")]


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "array", "uniqueItems": True}, "uniqueItems"),
        ({"type": "object", "not": {"type": "string"}}, "not"),
        ({"type": "string", "format": "no-such-format"}, "no-such-format"),
        ({"type": "no-such-type"}, "no-such-type"),
    ],
)
def test_an_unenforceable_schema_is_refused_by_name(codec, schema, named):
    with pytest.raises(GrammarError, match=named):
        codec.grammars.check(grammar_request(JSON_SCHEMA, schema))


def test_logit_bias_moves_the_greedy_choice():
    logits = np.array([0.0, 5.0, 4.0, 1.0], np.float32)
    assert Sampler(SamplingParams(4, 0.0)).choose(logits) == 1
    biased = ShapedSampler(SamplingParams(4, 0.0, logit_bias=((1, -100.0), (3, 3.5))), None)
    assert biased.choose(logits) == 3  # 1 pushed out, 3 lifted past 2


def test_sampling_params_round_trip_through_json():
    params = SamplingParams(9, 0.5, response_format=grammar_request(JSON_SCHEMA, SCHEMA), logit_bias=((3, 1.5),))
    again = SamplingParams(**json.loads(json.dumps(dataclasses.asdict(params))))
    assert (again.response_format, again.logit_bias) == (params.response_format, params.logit_bias)
    assert again.logit_bias == ((3, 1.5),)  # pairs again, not JSON's lists


@pytest.mark.parametrize(
    "bias", [((0, 100.5),), ((-1, 1.0),), tuple((t, 1.0) for t in range(301)), ((2, float("nan")),)]
)
def test_bad_logit_bias_is_refused(bias):
    with pytest.raises(ValueError, match="logit_bias"):
        SamplingParams(4, logit_bias=bias)


def test_a_plain_sequence_keeps_the_plain_sampler(codec):
    seq = Sequence([0], SamplingParams(4), codec.decode, grammars=codec.grammars)
    assert type(seq.sampler) is Sampler and seq.constraint is None


def test_logits_wider_than_the_vocabulary_never_allow_the_extra_rows(codec):
    """A model whose head is padded past the tokenizer (as many are, to a multiple of 64) gets no token the
    tokenizer lacks."""
    vocab = codec.tokenizer.get_vocab_size()
    constraint = codec.grammars.constraint(grammar_request(JSON_OBJECT))
    wide, exact = constraint.allowed(vocab + 8), constraint.allowed(vocab)
    assert wide.shape == (vocab + 8,) and not wide[vocab:].any()
    assert (wide[:vocab] == exact).all() and exact.sum() == 1  # "{" alone may start an object


def test_a_tokenizer_the_engine_cannot_read_is_a_grammar_error():
    """Refused as a GrammarError (a 400 at the API), not an internal error."""

    class Unreadable:
        def get_vocab_size(self) -> int:
            return 4

        def to_str(self) -> str:
            return '{"model": "not a tokenizer"}'

    grammars = Grammars(Unreadable(), frozenset({1}))
    with pytest.raises(GrammarError, match="tokenizer cannot be constrained"):
        grammars.check(grammar_request(JSON_OBJECT))


@pytest.mark.needs("g++")
def test_on_a_device_the_sampler_takes_the_mask_and_bias(codec):
    """The device sampler (its kernel through the CuPy stand-in) gets each constrained row's mask and bias from
    shaping_constraints: random logits still give valid JSON, and a plain row beside it is its plain argmax."""
    from luminal.scheduler.generation.choosers import DeviceChooser
    from luminal.scheduler.generation.logit_shaping import shaping_constraints
    from tests.runtime.cuda import fake_cupy
    from tests.runtime.cuda.fake_sampler import shim_sampler

    chooser = DeviceChooser(shim_sampler(32), constraints=shaping_constraints)
    params = SamplingParams(200, 0.0, response_format=grammar_request(JSON_SCHEMA, SCHEMA), logit_bias=((89, 5.0),))
    constrained = Sequence([0], params, codec.decode, codec.eos_token_ids, grammars=codec.grammars)
    plain = Sequence([0], SamplingParams(200, 0.0), codec.decode, grammars=codec.grammars)
    rng = np.random.default_rng(1)
    while not constrained.finished:
        logits = rng.normal(scale=3.0, size=(2, codec.tokenizer.get_vocab_size())).astype(np.float32)
        (token, _), (free, _) = chooser.choose([constrained, plain], fake_cupy.asarray(logits))
        assert free == int(np.argmax(logits[1]))
        constrained.add(token)
    jsonschema.validate(json.loads(constrained.text), SCHEMA)
