"""The tool fields of a chat completion request as OpenAI documents them: `tools` (functions with a name, a
description and a JSON schema of their parameters), `tool_choice` and `parallel_tool_calls`, and the chat
history's tool calls (an assistant message's `tool_calls`, a `role: "tool"` message's `tool_call_id`). Checked here
so that a bad one is a 400 naming it; whether the grammar engine can enforce a parameter schema is checked with
the model's tokenizer (openai_tools.py)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

MAX_TOOLS = 128  # OpenAI's limit on functions per request
FUNCTION_NAME = r"^[A-Za-z0-9_-]{1,64}$"  # OpenAI's rule; a grammar writes names unescaped (tool_call_formats.py)


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr = Field(pattern=FUNCTION_NAME)
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None  # None: no parameters (the arguments are `{}`)
    strict: bool | None = None  # enforced either way under required or a named function: a grammar has no "mostly"

    @field_validator("parameters")
    @classmethod
    def _an_object_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None and schema.get("type", "object") != "object":
            raise ValueError(f'parameters must be a JSON schema of type "object", got type {schema["type"]!r}')
        return schema

    def arguments_schema(self) -> dict[str, Any]:
        """The schema a call's arguments must meet (an empty parameter list: the empty object)."""
        if self.parameters is None:
            return {"type": "object", "properties": {}, "additionalProperties": False}
        return {"type": "object", **self.parameters}


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionName


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice
Tools = Annotated[list[FunctionTool], Field(min_length=1, max_length=MAX_TOOLS)]


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr = Field(min_length=1)
    arguments: StrictStr  # JSON text, as the answer carried it

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, arguments: str) -> str:
        try:
            value = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise ValueError(f"arguments must be JSON text: {e}") from None
        if not isinstance(value, dict):
            raise ValueError("arguments must be the JSON text of an object")
        return arguments


class ToolCall(BaseModel):
    """A call an assistant message made (sent back in the next turn's history)."""

    model_config = ConfigDict(extra="forbid")
    id: StrictStr = Field(min_length=1)
    type: Literal["function"]
    function: CalledFunction

    def for_template(self) -> dict[str, Any]:
        """As chat templates take a call (and transformers' documentation writes it): the arguments an object,
        not its JSON text, so that the template's `tojson` writes them as the model wrote them."""
        function = {"name": self.function.name, "arguments": json.loads(self.function.arguments)}
        return {"id": self.id, "type": self.type, "function": function}
