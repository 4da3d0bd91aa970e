"""The model's tokenizer as transformers' fast tokenizer applies it: `tokenizers` for the text, the special
tokens named by tokenizer_config.json, and the end-of-sequence ids generate() stops at."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tokenizers import Tokenizer

from luminal.scheduler.generation.chat_template import ChatTemplateError, render_chat
from luminal.scheduler.generation.grammar import Grammars

SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def _content(token: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


def _ids(value: Any) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


@dataclass
class TextCodec:
    tokenizer: Tokenizer
    special_tokens: dict[str, str]  # bos_token, eos_token, ... -> their text
    chat_template: str | None
    eos_token_ids: frozenset[int]

    @classmethod
    def of(
        cls,
        tokenizer_json: str,
        tokenizer_config: dict[str, Any],
        chat_template: str | None,
        config: dict[str, Any],
        generation_config: dict[str, Any],
    ) -> TextCodec:
        tokenizer = Tokenizer.from_str(tokenizer_json)
        special = {n: t for n in SPECIAL_NAMES if (t := _content(tokenizer_config.get(n))) is not None}
        template = chat_template if chat_template is not None else tokenizer_config.get("chat_template")
        if isinstance(template, list):  # several named templates: the "default" one is what transformers uses
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        # generate() stops at generation_config's eos ids, else config.json's, else the tokenizer's eos token.
        eos = _ids(generation_config.get("eos_token_id")) or _ids(config.get("eos_token_id"))
        if not eos and "eos_token" in special and tokenizer.token_to_id(special["eos_token"]) is not None:
            eos = [tokenizer.token_to_id(special["eos_token"])]
        return cls(tokenizer, special, template if isinstance(template, str) else None, frozenset(eos))

    @cached_property
    def grammars(self) -> Grammars:
        """This tokenizer's grammar compiler (response_format), shared by every sequence of the model."""
        return Grammars(self.tokenizer, self.eos_token_ids)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_text(self, token: int) -> str:
        """One token's own text, special tokens spelled out (what logprobs list: "</s>" is a token there)."""
        return self.tokenizer.decode([token], skip_special_tokens=False)

    def chat_prompt(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[int]:
        """The conversation (and the tools offered, JSON schemas) rendered by the chat template and tokenized as
        apply_chat_template(tokenize=True) does: the template writes the special tokens itself, so none are added."""
        if self.chat_template is None:
            raise ChatTemplateError("this model has no chat template; use /completions with a prompt")
        text = render_chat(self.chat_template, messages, add_generation_prompt, tools, **self.special_tokens)
        return self.encode(text, add_special_tokens=False)
