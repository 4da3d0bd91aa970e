"""`POST /openai/v1/completions`: text (or token ids) in, the model's continuation out, whole or streamed."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from luminal.gateway.dependencies import PlatformDep, TenantDep
from luminal.gateway.metrics import ModelLabels
from luminal.gateway.openai_errors import OpenAIRoute, arrival_of, note_model
from luminal.gateway.openai_generation import Answer, check_token_ids, language_model, sampling_params
from luminal.gateway.openai_logprobs import CompletionLogprobs
from luminal.gateway.openai_response_format import shaped
from luminal.gateway.openai_schemas import CompletionCreate
from luminal.gateway.request_body import read_json_model

router = APIRouter(route_class=OpenAIRoute)
MAX_BODY_BYTES = 4 << 20  # a long prompt is a few hundred KiB of text


def _choice(text: str, finish_reason: str | None, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


@router.post("/completions")
async def create_completion(request: Request, tenant: TenantDep, platform: PlatformDep) -> Response:
    body = await read_json_model(request, CompletionCreate, MAX_BODY_BYTES)
    served = await language_model(platform, tenant, body.model)
    note_model(request, ModelLabels.of(served.name, served.deployment["version"], served.deployment["id"]))
    prompt = body.prompt_value()
    ids = served.codec.encode(prompt) if isinstance(prompt, str) else prompt
    check_token_ids(served.codec, ids, "prompt")
    params = sampling_params(body, body.max_tokens, ids, served.max_positions)
    params = await shaped(params, body, served.codec)
    logprobs = None if params.logprobs is None else CompletionLogprobs(served.codec)
    started = await served.start(ids, params, body, arrival_of(request))
    answer = Answer(body.model, started, "cmpl", "text_completion", _choice, logprobs=logprobs)
    if body.stream:
        return answer.sse(body.include_usage)
    text, reason, token_logprobs = await answer.collect(request)
    choice = _choice(text, reason, token_logprobs)
    return JSONResponse(answer.envelope("text_completion", [choice], usage=answer.usage()), headers=answer.headers())
