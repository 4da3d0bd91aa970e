"""What a chat request's tools ask of its generation: the tools handed to the chat template (as transformers'
`apply_chat_template(..., tools=...)` hands them), the grammar that forces a call (tool_choice "required" or a named
function), and how the answer is read back (`ToolCallReader`).

Every function's parameter schema is compiled by the model's grammar engine when the request arrives, whatever the
choice, so a schema it cannot enforce is a 400 naming the function and the keyword. The tool-call format is the one
the model's chat template teaches (tool_call_formats.py); a template that teaches none cannot be asked for calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from luminal.gateway.openai_errors import OpenAIError
from luminal.gateway.openai_schemas import ChatCompletionCreate
from luminal.gateway.openai_tool_stream import ToolCallReader
from luminal.scheduler.generation.grammar import JSON_SCHEMA, LARK, GrammarError, grammar_request
from luminal.scheduler.generation.tokenizer import TextCodec
from luminal.scheduler.generation.tool_call_formats import MAX_PARALLEL_CALLS, ToolCallFormat, format_of_template


@dataclass(frozen=True)
class ToolUse:
    choice: str  # none, auto, required or named (ChatCompletionCreate.chosen_tools)
    fmt: ToolCallFormat | None  # None only with choice "none"
    functions: dict[str, dict[str, Any]]  # the functions a call may name -> their arguments' schemas
    parallel: bool
    for_template: list[dict[str, Any]]  # the tools as the chat template gets them

    def grammar(self) -> str | None:
        """The grammar request of a forced call (None: the answer is free)."""
        if self.choice not in ("required", "named"):
            return None
        calls = MAX_PARALLEL_CALLS if self.parallel and self.choice == "required" else 1
        return grammar_request(LARK, lark=self.fmt.grammar(self.functions, calls))

    def reader(self) -> ToolCallReader | None:
        """How the answer is read (None: as plain content)."""
        if self.choice == "none":
            return None
        return ToolCallReader(self.fmt, forced=self.choice != "auto", parallel=self.parallel)


async def tool_use(body: ChatCompletionCreate, codec: TextCodec, model: str) -> ToolUse | None:
    """The request's tools, checked against the model (None: it has none)."""
    if not body.tools:
        return None
    choice = body.chosen_tools()
    fmt = format_of_template(codec.chat_template)
    if fmt is None and choice != "none":
        formats = "hermes <tool_call> or Llama 3.1 JSON"
        message = f"model {model!r} has a chat template that teaches no tool-call format this server reads ({formats})"
        raise OpenAIError(400, f"{message}; only tool_choice 'none' is served", "tools")
    schemas = {tool.function.name: tool.function.arguments_schema() for tool in body.tools}
    for i, (name, schema) in enumerate(schemas.items()):
        request = grammar_request(JSON_SCHEMA, schema)
        if codec.grammars.compiled(request):
            continue
        try:
            await run_in_threadpool(codec.grammars.check, request)
        except GrammarError as e:
            raise OpenAIError(400, f"tools[{i}] ({name}): {e}", f"tools[{i}].function.parameters") from None
    if choice == "named":
        schemas = {body.tool_choice.function.name: schemas[body.tool_choice.function.name]}
    return ToolUse(choice, fmt, schemas, body.parallel_tool_calls, body.offered_tools())
