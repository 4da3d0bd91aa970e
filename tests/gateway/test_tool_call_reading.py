"""Tool calls without a model: forced calls (tool_choice "required" or a named function) generated under their
grammar by random logits are calls whose arguments validate, in each family's format, one or several; the reader
streams them as OpenAI's deltas that fold into the whole answer; free answers (tool_choice "auto") are parsed in
both formats, and what does not parse stays content; a model whose template teaches no format is offered none."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import jsonschema
import pytest

from luminal.gateway.openai_errors import OpenAIError
from luminal.gateway.openai_schemas import ChatCompletionCreate
from luminal.gateway.openai_tool_stream import TOOL_CALLS, ToolCallReader, folded, merged
from luminal.gateway.openai_tools import tool_use
from luminal.scheduler.generation.grammar import LARK, grammar_request
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.sequence import STOP
from luminal.scheduler.generation.tool_call_formats import FORMATS, HERMES, LLAMA3_JSON
from luminal.scheduler.generation.tool_call_parsing import parse_calls
from tests.gateway.tool_fixtures import ASK, TOOLS, schema_of
from tests.llm_folders import CHAT_TEMPLATE
from tests.scheduler.random_logits import driven, plain_codec

FUNCTIONS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def codec():
    return plain_codec()


def _read(reader: ToolCallReader, pieces: list[str], reason: str = STOP) -> tuple[dict, list[dict], str | None]:
    """(the deltas folded, each delta, the finish reason) of text arriving in `pieces`."""
    deltas = [reader.feed(piece) for piece in pieces] + [reader.end()]
    whole: dict = {}
    for delta in deltas:
        whole = merged(whole, delta)
    return whole, [d for d in deltas if d], reader.finish_reason(reason)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("max_calls", [1, 3])
@pytest.mark.parametrize("seed", range(3))
def test_forced_calls_validate_and_stream(codec, fmt, max_calls, seed):
    grammar = grammar_request(LARK, lark=fmt.grammar(FUNCTIONS, max_calls))
    pieces: list[str] = []
    seq = driven(codec, SamplingParams(400, 1.0, seed=seed, response_format=grammar), seed, pieces)
    assert seq.finish_reason == STOP and len(seq.tokens) < 400
    whole, deltas, reason = _read(ToolCallReader(fmt, forced=True, parallel=max_calls > 1), pieces)
    content, calls = folded(whole)
    assert content is None and reason == TOOL_CALLS and 1 <= len(calls) <= max_calls
    for call in calls:
        assert call["id"].startswith("call_") and call["type"] == "function"
        jsonschema.validate(json.loads(call["function"]["arguments"]), schema_of(call["function"]["name"]))
    # Each call's first delta names it; its arguments come in several fragments, as they are decoded.
    firsts = [c for d in deltas for c in d["tool_calls"] if "id" in c]
    assert [c["function"]["name"] for c in firsts] == [c["function"]["name"] for c in calls]
    assert sum(1 for d in deltas for c in d["tool_calls"] if "id" not in c) > len(calls)
    # All at once, the same calls (but for their fresh ids).
    at_once = folded(_read(ToolCallReader(fmt, forced=True, parallel=True), [seq.text])[0])[1]
    assert [c["function"] for c in at_once] == [c["function"] for c in calls]


def test_a_named_function_is_the_only_one_called(codec):
    grammar = grammar_request(LARK, lark=HERMES.grammar({"add": FUNCTIONS["add"]}, 1))
    for seed in range(3):
        seq = driven(codec, SamplingParams(200, 1.0, seed=seed, response_format=grammar), seed)
        assert seq.text.startswith('<tool_call>\n{"name": "add", "arguments": {"a":')
        assert parse_calls(seq.text, HERMES)[0].name == "add"


HERMES_TEXT = (
    'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": true}}\n</tool_call>'
)
LLAMA_TEXT = (
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}; '
    '{"name": "add", "parameters": {"a": 2, "b": true}}'
)


@pytest.mark.parametrize(
    ("fmt", "text", "content"), [(HERMES, HERMES_TEXT, "Let me look.\n"), (LLAMA3_JSON, LLAMA_TEXT, None)]
)
@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_free_answers_parse_in_both_formats(fmt, text, content, piece):
    whole, _, reason = _read(
        ToolCallReader(fmt, forced=False, parallel=True), [text[i : i + piece] for i in range(0, len(text), piece)]
    )
    got_content, calls = folded(whole)
    assert got_content == content and reason == TOOL_CALLS
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "c"}),
        ("add", {"a": 2, "b": True}),
    ]
    one = folded(_read(ToolCallReader(fmt, forced=False, parallel=False), [text])[0])[1]
    assert [c["function"]["name"] for c in one] == ["get_weather"]  # parallel_tool_calls false: the first only


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        (HERMES, "no call here, just <tool_ words"),
        (HERMES, '<tool_call>\n{"name": "add", "arguments": {"a": 2\n</tool_call>'),  # broken JSON
        (HERMES, '<tool_call>\n{"arguments": {}}\n</tool_call>'),  # no name
        (HERMES, '<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call> and then words'),
        (LLAMA3_JSON, '{"name": "add", "parameters": [1]}'),  # arguments not an object
        (LLAMA3_JSON, '{"name": "add", "parameters": {}} trailing'),
        (LLAMA3_JSON, "The answer is {1}"),
        (LLAMA3_JSON, "   "),
    ],
)
@pytest.mark.parametrize("piece", [1, 1000])
def test_what_does_not_parse_stays_content(fmt, text, piece):
    whole, _, reason = _read(
        ToolCallReader(fmt, forced=False, parallel=True), [text[i : i + piece] for i in range(0, len(text), piece)]
    )
    assert folded(whole) == (text or None, []) and reason == STOP


def test_free_content_streams_before_a_possible_call():
    """Text streams as it comes, but for a tail that may begin a call, which waits until it cannot."""
    reader = ToolCallReader(HERMES, forced=False, parallel=True)
    assert reader.feed("Hello <tool") == {"content": "Hello "}
    assert reader.feed("box>") == {"content": "<toolbox>"}
    assert reader.feed(" <tool_call>\n{") == {"content": " "}
    llama = ToolCallReader(LLAMA3_JSON, forced=False, parallel=True)
    assert llama.feed(" ") == {} and llama.feed("Sure") == {"content": " Sure"}


def test_a_template_that_teaches_no_format_serves_only_none(codec):
    """The tests' own template renders no tools: asking its model for calls is a 400; `none` renders as usual."""
    body = ChatCompletionCreate.model_validate({"model": "m", "messages": ASK, "tools": TOOLS})
    plain = dataclasses.replace(codec, chat_template=CHAT_TEMPLATE)
    with pytest.raises(OpenAIError) as caught:
        asyncio.run(tool_use(body, plain, "m"))
    assert caught.value.status == 400 and "teaches no tool-call format" in caught.value.message
    none = asyncio.run(tool_use(body.model_copy(update={"tool_choice": "none"}), plain, "m"))
    assert none.reader() is None and none.grammar() is None
