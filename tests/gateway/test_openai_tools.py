"""Tool calling through the official `openai` client against a running gateway with tiny random-weight models: a
Qwen2 with a Qwen2.5-style (hermes) chat template and a Llama with a Llama 3.1-style one. A random model writes no
call of its own, so calls that parse and whose arguments validate come from constrained decoding alone:
`required` and a named function give them (one, or several in parallel), whole and streamed as OpenAI's deltas;
`none` and `auto` leave the model's text as content; a follow-up turn carrying the assistant's call and the tool's
answer renders as transformers renders it and generates; bad tool specs are 400s naming the problem; and a batch
mixing forced calls with free sequences completes, each answer equal to its answer alone."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import openai
import pytest
import transformers

from tests.gateway.openai_world import MAX_BATCH, start_world
from tests.gateway.tool_fixtures import ADD, ASK, FOLLOW_UP, TOOLS, WEATHER, schema_of
from tests.tool_chat_templates import HERMES_TEMPLATE, LLAMA31_TEMPLATE

TEMPLATES = {"qwen2": HERMES_TEMPLATE, "llama": LLAMA31_TEMPLATE}
MODELS = ["tiny-qwen2", "tiny-llama"]
POSITIONS = 2048  # the Llama 3.1-style prompt with both tools is about 1,400 of the test tokenizer's tokens
ONE_CALL = 120  # tokens enough for one forced call of either function
NAMED_ADD = {"type": "function", "function": {"name": "add"}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    world, stop = start_world(tmp_path_factory.mktemp("openai-tools"), tuple(TEMPLATES), POSITIONS, TEMPLATES)
    yield world
    stop()


def _ask(world, model: str, **kwargs):
    kwargs.setdefault("messages", ASK)
    kwargs.setdefault("tools", TOOLS)
    return world.client().chat.completions.create(model=model, **kwargs)


def _validated(calls) -> list[tuple[str, dict]]:
    """(name, arguments) of each call, its arguments checked against its function's parameter schema."""
    out = []
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, schema_of(call.function.name))
        out.append((call.function.name, arguments))
    return out


def _streamed_calls(chunks) -> tuple[list[dict], str | None, int]:
    """The calls a stream's tool-call deltas make, its finish reason, and how many argument fragments came."""
    calls, reason, fragments = {}, None, 0
    for chunk in chunks:
        choice = chunk.choices[0]
        reason = choice.finish_reason or reason
        for delta in choice.delta.tool_calls or ():
            if delta.id is not None:  # a call's first delta: its id, type and name
                assert delta.index not in calls and delta.type == "function" and delta.function.name
                calls[delta.index] = {"id": delta.id, "name": delta.function.name, "arguments": ""}
            fragments += bool(delta.function.arguments)
            calls[delta.index]["arguments"] += delta.function.arguments or ""
    return [calls[i] for i in sorted(calls)], reason, fragments


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("choice", ["required", NAMED_ADD])
def test_a_forced_call_validates_whole_and_streamed(world, model, choice):
    kwargs = dict(tool_choice=choice, parallel_tool_calls=False, max_tokens=ONE_CALL, temperature=0)
    answer = _ask(world, model, **kwargs).choices[0]
    assert answer.finish_reason == "tool_calls" and answer.message.content is None
    (called,) = _validated(answer.message.tool_calls)
    if choice is NAMED_ADD:
        assert called[0] == "add"
    calls, reason, fragments = _streamed_calls(_ask(world, model, stream=True, **kwargs))
    assert reason == "tool_calls" and [(c["name"], json.loads(c["arguments"])) for c in calls] == [called]
    assert fragments > 1  # the arguments streamed as they were decoded


@pytest.mark.parametrize(("model", "seed"), [("tiny-qwen2", None), ("tiny-llama", 1)])
def test_parallel_forced_calls(world, model, seed):
    """With parallel_tool_calls (the default) a model may make several calls; these seeds make two."""
    temperature = 0 if seed is None else 1
    answer = _ask(world, model, tool_choice="required", max_tokens=400, temperature=temperature, seed=seed).choices[0]
    assert answer.finish_reason == "tool_calls"
    assert len(_validated(answer.message.tool_calls)) == 2
    assert len({call.id for call in answer.message.tool_calls}) == 2


@pytest.mark.parametrize("model", MODELS)
def test_none_and_auto_leave_a_free_answer_as_content(world, model):
    """The tools are still rendered (the prompt is as long with `none` as with `required`), but no call is made:
    the random model's free text is no call in either format, so `auto` answers the same content."""
    kwargs = dict(max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    none = _ask(world, model, tool_choice="none", **kwargs)
    auto = _ask(world, model, tool_choice="auto", **kwargs)
    forced = _ask(world, model, tool_choice="required", max_tokens=1)
    for answer in (none, auto):
        assert answer.choices[0].message.tool_calls is None and answer.choices[0].finish_reason == "length"
        assert answer.usage.prompt_tokens == forced.usage.prompt_tokens
    assert auto.choices[0].message.content == none.choices[0].message.content != ""
    streamed = _ask(world, model, tool_choice="auto", stream=True, **kwargs)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == auto.choices[0].message.content


@pytest.mark.parametrize("model", MODELS)
def test_a_follow_up_turn_renders_as_transformers_and_generates(world, model):
    reference = transformers.AutoTokenizer.from_pretrained(world.folders[model])
    as_transformers = [dict(m) for m in FOLLOW_UP]
    call = FOLLOW_UP[1]["tool_calls"][0]
    as_transformers[1]["tool_calls"] = [
        {**call, "function": {**call["function"], "arguments": json.loads(call["function"]["arguments"])}}
    ]
    ids = reference.apply_chat_template(as_transformers, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    want = len(reference(ids, add_special_tokens=False)["input_ids"])
    answer = _ask(world, model, messages=FOLLOW_UP, max_tokens=8, temperature=0)
    assert answer.usage.prompt_tokens == want and answer.usage.completion_tokens >= 1
    assert answer.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"tools": [WEATHER, WEATHER]}, "'get_weather' appear more than once"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools.0.function.name"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
            'type "object"',
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"properties": {"x": {"type": "array", "uniqueItems": True}}},
                        },
                    }
                ]
            },
            "uniqueItems",
        ),
        ({"tools": [{"type": "retrieval"}]}, "tools.0.type"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "'nope', which is not in tools",
        ),
        ({"tool_choice": "required"}, "tool_choice needs tools"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
        ({"messages": [*ASK, {"role": "tool", "content": "21"}]}, "tool_call_id"),
        (
            {
                "messages": [
                    {
                        **FOLLOW_UP[1],
                        "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
                        ],
                    }
                ]
            },
            "arguments must be JSON",
        ),
        (
            {"messages": [{"role": "user", "content": "hi", "tool_calls": FOLLOW_UP[1]["tool_calls"]}]},
            "only assistant messages",
        ),
    ],
)
def test_bad_tool_specs_are_400s_naming_the_problem(world, body, named):
    engine = world.engine(MODELS[0])
    prompt_runs = engine.prompt_runs
    request = {"model": MODELS[0], "messages": ASK, "max_tokens": 4, **body}
    with pytest.raises(openai.BadRequestError) as caught:
        world.client().post("/chat/completions", body=request, cast_to=object)
    assert named in caught.value.body["message"], caught.value.body
    assert engine.prompt_runs == prompt_runs  # refused before it was queued


def test_legacy_completions_take_no_tools(world):
    with pytest.raises(openai.BadRequestError) as caught:
        world.client().completions.create(model=MODELS[0], prompt="x", max_tokens=2, extra_body={"tools": TOOLS})
    assert "/chat/completions" in caught.value.body["message"]


async def _one(client, job) -> tuple:
    forced, max_tokens = job
    # One short tool: the prompt's prefills are most of this test's time.
    kwargs = dict(model=MODELS[0], messages=ASK, tools=[ADD], temperature=0, max_tokens=max_tokens, stream=True)
    if forced:
        kwargs.update(tool_choice="required", parallel_tool_calls=False)
    else:
        kwargs.update(tool_choice="none", extra_body={"ignore_eos": True})
    stream = await client.chat.completions.create(**kwargs)
    chunks = [chunk async for chunk in stream]
    calls, reason, _ = _streamed_calls(chunks)
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    return content, [(c["name"], c["arguments"]) for c in calls], reason


def test_a_batch_mixing_forced_calls_and_free_sequences(world):
    """16 streams at once, every other one a forced call, the free ones of four lengths (leaving the batch at
    different steps): each equals its answer alone (asked once per distinct job), and they share steps."""
    jobs = [(True, ONE_CALL) if k % 2 else (False, 8 + 2 * (k // 2 % 4)) for k in range(MAX_BATCH)]

    async def run(batch):
        client = world.async_client()
        try:
            return await asyncio.gather(*(_one(client, job) for job in batch))
        finally:
            await client.close()

    alone_once = {job: asyncio.run(run([job]))[0] for job in set(jobs)}
    alone = [alone_once[job] for job in jobs]
    engine = world.engine(MODELS[0])
    steps, rows = engine.steps, engine.rows_stepped
    assert asyncio.run(run(jobs)) == alone
    assert (engine.rows_stepped - rows) / (engine.steps - steps) > 4  # decode steps were shared
    for (content, calls, reason), (forced, _) in zip(alone, jobs, strict=True):
        if forced:
            assert reason == "tool_calls" and content == "" and len(calls) == 1
            jsonschema.validate(json.loads(calls[0][1]), schema_of(calls[0][0]))
        else:
            assert reason == "length" and content and not calls
