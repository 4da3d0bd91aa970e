"""`POST /openai/v1/chat/completions`: messages rendered by the model's chat template, the assistant's reply
out, whole or streamed (a first chunk with the assistant role, then content deltas)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import PlatformDep, TenantDep
from luminal.gateway.openai_errors import OpenAIRoute, arrival_of
from luminal.gateway.openai_generation import Answer, language_model, sampling_params
from luminal.gateway.openai_logprobs import ChatLogprobs
from luminal.gateway.openai_response_format import shaped
from luminal.gateway.openai_schemas import ChatCompletionCreate
from luminal.gateway.request_body import read_json_model

router = APIRouter(route_class=OpenAIRoute)
MAX_BODY_BYTES = 4 << 20
CHUNK = "chat.completion.chunk"


def _delta(text: str, finish_reason: str | None, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    delta = {"content": text} if text else {}
    return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


@router.post("/chat/completions")
async def create_chat_completion(request: Request, tenant: TenantDep, platform: PlatformDep) -> Response:
    body = await read_json_model(request, ChatCompletionCreate, MAX_BODY_BYTES)
    served = await language_model(platform, tenant, body.model)
    messages = [m.for_template() for m in body.messages]
    # A template is user-supplied code (sandboxed): render it off the event loop.
    ids = await run_in_threadpool(served.codec.chat_prompt, messages, body.add_generation_prompt)
    params = sampling_params(body, body.token_limit(), ids, served.max_positions)
    params = await shaped(params, body, served.codec)
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    logprobs = None if params.logprobs is None else ChatLogprobs(served.codec)
    started = await served.start(ids, params, body, arrival_of(request))
    answer = Answer(body.model, started, "chatcmpl", CHUNK, _delta, first, logprobs)
    if body.stream:
        return answer.sse(body.include_usage)
    text, reason, token_logprobs = await answer.collect(request)
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "logprobs": token_logprobs, "finish_reason": reason}
    return JSONResponse(answer.envelope("chat.completion", [choice], usage=answer.usage()))
