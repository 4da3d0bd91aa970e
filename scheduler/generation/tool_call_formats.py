"""How model families write tool calls, which family a chat template teaches, and the grammar that forces a call.

Two formats are read and written:

- `hermes` (Qwen2.5, Qwen3, Hermes 2 Pro / 3 and the templates copied from them): each call is
  `<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>`, after any text, several calls one after another.
- `llama3_json` (Llama 3.1, 3.2 and 3.3 with JSON tool calling): the whole answer is `{"name": NAME, "parameters":
  ARGS}`, optionally after `<|python_tag|>`; several calls are separated by `;` (how vLLM's llama3_json parser reads
  them: the family's own documentation shows one call per answer).

A template that writes `<tool_call>` teaches hermes; one that writes `<|python_tag|>` or asks for `"parameters"`
teaches llama3_json; any other template teaches no format, and its model is not offered calls it cannot write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# A forced answer ends after this many calls even if the model never writes its end (OpenAI sets no number; the
# grammar needs one so that it is complete, and the sequence stops, at the last).
MAX_PARALLEL_CALLS = 8
PYTHON_TAG = "<|python_tag|>"
# How compact the forced arguments are: as response_format's JSON (grammar.py), no optional whitespace.
COMPACT = {"whitespace_flexible": False}


@dataclass(frozen=True)
class ToolCallFormat:
    name: str
    arguments_key: str  # the key of a call's arguments in its JSON object
    opener: str  # written before each call's JSON object
    closer: str  # written after it
    separator: str  # written between two calls (after the closer)
    # Where a call may begin: after any text (True), or only as the whole answer (False).
    after_text: bool
    # Texts that begin a call (an answer holding one of them, where calls may begin, is read as calls).
    starts: tuple[str, ...]

    def call_prefix(self, function: str) -> str:
        """What a forced call of `function` writes before its arguments (names are [A-Za-z0-9_-], never escaped)."""
        return f'{self.opener}{{"name": "{function}", "{self.arguments_key}": '

    def call_suffix(self) -> str:
        return "}" + self.closer

    def grammar(self, functions: dict[str, dict[str, Any]], max_calls: int) -> str:
        """A Lark grammar (llguidance's dialect) of 1..max_calls calls, each of one of `functions` (name ->
        parameters schema) with compact arguments valid under the function's schema."""
        more = f" ({_literal(self.separator)} call){{0,{max_calls - 1}}}" if max_calls > 1 else ""
        lines = [f"start: call{more}"]
        lines.append("call: " + " | ".join(f"call_{i}" for i in range(len(functions))))
        for i, (name, schema) in enumerate(functions.items()):
            compact = {**schema, "x-guidance": COMPACT}
            lines.append(f"call_{i}: {_literal(self.call_prefix(name))} args_{i} {_literal(self.call_suffix())}")
            lines.append(f"args_{i}: %json {json.dumps(compact, separators=(',', ':'))}")
        return "\n".join(lines) + "\n"


def _literal(text: str) -> str:
    """A Lark string literal of `text` (its escapes are JSON's)."""
    return json.dumps(text)


HERMES = ToolCallFormat("hermes", "arguments", "<tool_call>\n", "\n</tool_call>", "\n", True, ("<tool_call>",))
LLAMA3_JSON = ToolCallFormat("llama3_json", "parameters", "", "", "; ", False, ("{", PYTHON_TAG))
FORMATS = (HERMES, LLAMA3_JSON)


def format_of_template(template: str | None) -> ToolCallFormat | None:
    """The tool-call format a chat template teaches its model (None: none this server reads)."""
    if template is None:
        return None
    if "<tool_call>" in template:
        return HERMES
    if PYTHON_TAG in template or '"parameters"' in template:
        return LLAMA3_JSON
    return None
