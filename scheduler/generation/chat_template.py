"""Chat templates rendered as transformers' apply_chat_template renders them: Jinja in a sandbox (a template
comes with an uploaded model and must not reach Python internals), trim_blocks and lstrip_blocks, the
`raise_exception` and `strftime_now` helpers, a `tojson` that keeps non-ASCII text, and the variables
messages, tools (the function tools' JSON schemas, or None), documents (None), add_generation_prompt and the
tokenizer's special tokens (bos_token, eos_token, ...)."""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError
from jinja2.exceptions import TemplateSyntaxError
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The template cannot be compiled or refused the conversation (its raise_exception)."""


def _raise(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys=False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=32)
def _compiled(source: str):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except TemplateSyntaxError as e:
        raise ChatTemplateError(f"the model's chat template does not compile: {e}") from None


def render_chat(
    template: str,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    **special_tokens: Any,
) -> str:
    try:
        # documents: transformers passes it too (None unless given), which a template may test.
        variables = dict(messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt)
        return _compiled(template).render(**variables, **special_tokens)
    except ChatTemplateError:
        raise
    except TemplateError as e:
        raise ChatTemplateError(f"the chat template failed on these messages: {e}") from None
