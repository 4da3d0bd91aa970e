"""`POST /openai/v1/chat/completions`: messages (and the tools offered) rendered by the model's chat template, the
assistant's reply out, whole or streamed (a first chunk with the assistant role, then content or tool-call
deltas)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import PlatformDep, TenantDep
from luminal.gateway.metrics import ModelLabels
from luminal.gateway.openai_errors import OpenAIRoute, arrival_of, note_model
from luminal.gateway.openai_generation import Answer, language_model, sampling_params
from luminal.gateway.openai_logprobs import ChatLogprobs
from luminal.gateway.openai_response_format import shaped
from luminal.gateway.openai_schemas import ChatCompletionCreate
from luminal.gateway.openai_tool_stream import ToolCallReader, folded, merged
from luminal.gateway.openai_tools import tool_use
from luminal.gateway.request_body import read_json_model

router = APIRouter(route_class=OpenAIRoute)
MAX_BODY_BYTES = 4 << 20
CHUNK = "chat.completion.chunk"
Choice = Callable[[str, str | None, dict[str, Any] | None], dict[str, Any] | None]


def _delta(text: str, finish_reason: str | None, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    delta = {"content": text} if text else {}
    return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


def _read_deltas(reader: ToolCallReader) -> Choice:
    """Streamed choices of an answer that may hold tool calls: the reader's deltas, none while it holds text."""

    def choice(text: str, finish_reason: str | None, logprobs: dict[str, Any] | None = None) -> dict[str, Any] | None:
        delta = reader.feed(text)
        if finish_reason is None and not delta:
            return None
        if finish_reason is not None:
            delta = merged(delta, reader.end())
        return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": reader.finish_reason(finish_reason)}

    return choice


@router.post("/chat/completions")
async def create_chat_completion(request: Request, tenant: TenantDep, platform: PlatformDep) -> Response:
    body = await read_json_model(request, ChatCompletionCreate, MAX_BODY_BYTES)
    served = await language_model(platform, tenant, body.model)
    note_model(request, ModelLabels.of(served.name, served.deployment["version"], served.deployment["id"]))
    tools = await tool_use(body, served.codec, body.model)
    messages = [m.for_template() for m in body.messages]
    # A template is user-supplied code (sandboxed): render it off the event loop.
    offered = None if tools is None else tools.for_template
    ids = await run_in_threadpool(served.codec.chat_prompt, messages, body.add_generation_prompt, offered)
    params = sampling_params(body, body.token_limit(), ids, served.max_positions)
    params = await shaped(params, body, served.codec, None if tools is None else tools.grammar())
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    logprobs = None if params.logprobs is None else ChatLogprobs(served.codec)
    reader = None if tools is None else tools.reader()
    started = await served.start(ids, params, body, arrival_of(request))
    answer = Answer(body.model, started, "chatcmpl", CHUNK, _delta if reader is None else _read_deltas(reader), first,
                    logprobs)  # fmt: skip
    if body.stream:
        return answer.sse(body.include_usage)
    text, reason, token_logprobs = await answer.collect(request)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reader is not None:
        content, calls = folded(merged(reader.feed(text), reader.end()))
        message, reason = {"role": "assistant", "content": content}, reader.finish_reason(reason)
        if calls:
            message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "logprobs": token_logprobs, "finish_reason": reason}
    return JSONResponse(answer.envelope("chat.completion", [choice], usage=answer.usage()), headers=answer.headers())
