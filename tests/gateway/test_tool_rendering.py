"""Tools and tool turns rendered by a model's chat template exactly as transformers' apply_chat_template renders
them, for a Qwen2.5-style (hermes) and a Llama 3.1-style template: the request's messages as the API takes them
(an assistant call's arguments as JSON text) against transformers given them as its documentation writes them
(the arguments an object)."""

from __future__ import annotations

import json
import os

import pytest
import transformers

from luminal.gateway.openai_schemas import ChatCompletionCreate
from luminal.scheduler.generation.tokenizer import TextCodec
from tests.gateway.tool_fixtures import ASK, FOLLOW_UP, TOOLS
from tests.llm_folders import BOS, EOS, train_tokenizer
from tests.tool_chat_templates import HERMES_TEMPLATE, LLAMA31_TEMPLATE

os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
TEMPLATES = {"hermes": HERMES_TEMPLATE, "llama3_json": LLAMA31_TEMPLATE}


@pytest.fixture(scope="module")
def tokenizer_json() -> str:
    return train_tokenizer().to_str()


def _as_transformers_takes_them(messages: list[dict]) -> list[dict]:
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                for c in message["tool_calls"]
            ]
        out.append(message)
    return out


@pytest.mark.parametrize("family", TEMPLATES)
@pytest.mark.parametrize("messages", [ASK, FOLLOW_UP, [{"role": "system", "content": "be brief"}, *ASK]])
@pytest.mark.parametrize("tools", [TOOLS, None])
def test_tools_render_as_transformers_renders_them(tmp_path, tokenizer_json, family, messages, tools):
    template = TEMPLATES[family]
    (tmp_path / "tokenizer.json").write_text(tokenizer_json)
    config = {"bos_token": BOS, "eos_token": EOS, "chat_template": template}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    want = reference.apply_chat_template(_as_transformers_takes_them(messages), tools=tools, tokenize=False,
                                         add_generation_prompt=True)  # fmt: skip
    body = ChatCompletionCreate.model_validate({"model": "m", "messages": messages, "tools": tools})
    codec = TextCodec.of(tokenizer_json, config, None, {}, {})
    got = codec.chat_prompt([m.for_template() for m in body.messages], True, body.offered_tools())
    assert codec.decode(got) == want.replace(BOS, "")
    assert got == reference(want, add_special_tokens=False)["input_ids"]
    if tools is not None:
        assert '"name": "get_weather"' in want
    if messages is FOLLOW_UP:  # the call's arguments written as an object, the tool's answer in its turn
        assert '"city": "Paris"' in want and "21" in want


def test_a_null_tool_calls_is_no_call():
    """An answer's message sent back with "tool_calls": null renders as a plain assistant turn (the Llama 3.1-style
    template tests whether the key is there)."""
    message = {"role": "assistant", "content": "hi", "tool_calls": None}
    body = ChatCompletionCreate.model_validate({"model": "m", "messages": [*ASK, message]})
    assert body.messages[1].for_template() == {"role": "assistant", "content": "hi"}
