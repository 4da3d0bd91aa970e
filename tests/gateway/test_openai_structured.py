"""Structured outputs and logit_bias through the official `openai` client against a running gateway with a tiny
random-weight Llama: `json_schema` answers validate with jsonschema (the model's free answers are not even JSON,
so only constrained decoding makes them so), `json_object` answers parse, streams equal whole answers, 16
concurrent streams mixing constrained and free sequences each equal their answer alone, unenforceable schemas and
bad biases are 400s naming the problem, and logit_bias steers the greedy choice exactly as the biased logits say."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import openai
import pytest
import torch

from tests.gateway.openai_world import MAX_BATCH, start_world
from tests.json_schemas import PERSON

MODEL = "tiny-llama"
PROMPTS = ["the quick brown", "user: what", "hello world", "a compiler of few"]
SCHEMA = PERSON
AS_SCHEMA = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
MAX_TOKENS = 64  # an answer to SCHEMA takes about 50 of this tokenizer's tokens


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    world, stop = start_world(tmp_path_factory.mktemp("openai-structured"), ("llama",))
    yield world
    stop()


def _complete(world, prompt: str, **kwargs) -> openai.types.Completion:
    extra = {key: kwargs.pop(key) for key in ("response_format", "logit_bias", "ignore_eos") if key in kwargs}
    return world.client().completions.create(model=MODEL, prompt=prompt, extra_body=extra, **kwargs)


@pytest.mark.parametrize("prompt", PROMPTS[:3])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_answers_validate(world, prompt, temperature):
    answer = _complete(world, prompt, max_tokens=MAX_TOKENS, temperature=temperature, seed=5, response_format=AS_SCHEMA)
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"  # the grammar completed, before max_tokens
    jsonschema.validate(json.loads(choice.text), SCHEMA)
    free = _complete(world, prompt, max_tokens=answer.usage.completion_tokens, temperature=temperature, seed=5)
    with pytest.raises(json.JSONDecodeError):
        json.loads(free.choices[0].text)


def test_chat_json_schema_streamed_equals_whole(world):
    messages = [{"role": "user", "content": "who is it?"}]
    client = world.client()
    kwargs = dict(model=MODEL, messages=messages, max_tokens=MAX_TOKENS, temperature=0, response_format=AS_SCHEMA)
    whole = client.chat.completions.create(**kwargs)
    jsonschema.validate(json.loads(whole.choices[0].message.content), SCHEMA)
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason == "stop"


def test_json_object_answers_parse(world):
    """Any JSON object; a small bias towards quotes and braces lets a random model close its strings within a few
    tokens (the grammar alone would let it write one key forever)."""
    quote, brace = world.tokenizer.convert_tokens_to_ids(['"', "}"])
    for prompt in PROMPTS:
        for temperature in (0.0, 1.0):
            answer = _complete(world, prompt, max_tokens=MAX_TOKENS, temperature=temperature, seed=1,
                               response_format={"type": "json_object"},
                               logit_bias={str(quote): 3, str(brace): 3})  # fmt: skip
            assert answer.choices[0].finish_reason == "stop"
            assert isinstance(json.loads(answer.choices[0].text), dict)


def test_stop_string_cuts_a_constrained_answer(world):
    whole = _complete(world, PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0, response_format=AS_SCHEMA)
    cut = _complete(world, PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0, response_format=AS_SCHEMA, stop=[":"])
    assert cut.choices[0].text == whole.choices[0].text[: whole.choices[0].text.index(":")] == '{"name"'
    assert cut.choices[0].finish_reason == "stop"


async def _streamed(client, prompt: str, max_tokens: int, response_format) -> tuple[str, str]:
    extra = {"ignore_eos": True} if response_format is None else {"response_format": response_format}
    stream = await client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                             stream=True, extra_body=extra)  # fmt: skip
    parts, reason = [], None
    async for chunk in stream:
        parts.append(chunk.choices[0].text)
        reason = chunk.choices[0].finish_reason or reason
    return "".join(parts), reason


def test_concurrent_streams_mixing_constrained_and_free(world):
    """16 streams at once, every other one constrained: each equals its answer alone, and they share steps."""
    jobs = [(PROMPTS[k % 4] + " x" * (k // 4), 12 + k, AS_SCHEMA if k % 2 else None) for k in range(MAX_BATCH)]
    alone = []
    for prompt, n, response_format in jobs:
        extra = {"ignore_eos": True} if response_format is None else {"response_format": response_format}
        choice = _complete(world, prompt, max_tokens=n if response_format is None else MAX_TOKENS, temperature=0,
                           **extra).choices[0]  # fmt: skip
        alone.append((choice.text, choice.finish_reason))
    engine = world.engine(MODEL)
    steps, rows = engine.steps, engine.rows_stepped

    async def together():
        client = world.async_client()
        try:
            return await asyncio.gather(*(_streamed(client, p, n if f is None else MAX_TOKENS, f) for p, n, f in jobs))
        finally:
            await client.close()

    assert asyncio.run(together()) == alone
    assert (engine.rows_stepped - rows) / (engine.steps - steps) > 4  # decode steps were shared
    for (text, reason), (_, _, response_format) in zip(alone, jobs, strict=True):
        if response_format is not None:
            assert reason == "stop"
            jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "array", "uniqueItems": True}, "uniqueItems"),
        ({"type": "object", "not": {"required": ["a"]}}, '"not"'),
        ({"type": "string", "format": "no-such-format"}, "no-such-format"),
        ({"$ref": "https://example.com/schema.json"}, "https://example.com/schema.json"),
    ],
)
def test_an_unenforceable_schema_is_a_400_naming_it(world, schema, named):
    engine = world.engine(MODEL)
    prompt_runs = engine.prompt_runs
    response_format = {"type": "json_schema", "json_schema": {"name": "bad", "schema": schema}}
    with pytest.raises(openai.BadRequestError) as caught:
        world.client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=8, response_format=response_format)  # fmt: skip
    error = caught.value.body
    assert named in error["message"] and error["param"] == "response_format"
    assert engine.prompt_runs == prompt_runs  # refused before it was queued


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "json_schema"),
        ({"logit_bias": {"320": 1}}, "outside the vocabulary"),
        ({"logit_bias": {"-1": 1}}, "outside the vocabulary"),
        ({"logit_bias": {"5": 100.5}}, "less than or equal to 100"),
        ({"logit_bias": {"five": 1}}, "token ids"),
        ({"logit_bias": {str(t): 1 for t in range(301)}}, "logit_bias"),
    ],
)
def test_bad_response_format_or_logit_bias_is_a_400(world, extra, named):
    with pytest.raises(openai.BadRequestError) as caught:
        world.client().completions.create(model=MODEL, prompt="x", max_tokens=4, extra_body=extra)
    assert named in caught.value.body["message"]


def test_logit_bias_steers_the_greedy_choice(world):
    """The first token's logits from transformers: pushing every token above one down by 100 makes it the greedy
    choice; lifting the least likely by 100 makes that the choice. (Tokens told apart by their text: those whose text
    is a whole printable character.)"""
    ids = world.tokenizer(PROMPTS[1])["input_ids"]
    with torch.no_grad():
        logits = world.models[MODEL](torch.tensor([ids])).logits[0, -1]
    assert logits.max() - logits.min() < 100
    order = torch.argsort(logits, descending=True).tolist()
    text = {t: world.tokenizer.decode([t]) for t in order}
    clear = [
        t
        for t in order
        if text[t].isprintable() and "\ufffd" not in text[t] and list(text.values()).count(text[t]) == 1
    ]

    def first_token(bias: dict[int, float]) -> str:
        """The greedy first token's text, as logprobs list it."""
        answer = _complete(world, PROMPTS[1], max_tokens=1, temperature=0, logprobs=0, ignore_eos=True,
                           logit_bias={str(t): b for t, b in bias.items()})  # fmt: skip
        return answer.choices[0].logprobs.tokens[0]

    for target in clear[:3]:
        above = order[: order.index(target)]
        assert first_token({t: -100 for t in above}) == text[target]
    assert first_token({clear[-1]: 100}) == text[clear[-1]]
