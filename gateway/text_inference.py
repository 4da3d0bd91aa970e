"""The Open Inference Protocol's answer to text sent to an embedding deployment (see gateway/text_tensors.py):
the gateway tokenizes with the deployment's tokenizer, each text goes through the dynamic batcher as its own
request (as the OpenAI route sends them), and the embeddings come back as one FP32 tensor [N, dimensions]."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import Response
from starlette.concurrency import run_in_threadpool

from luminal.embedding_package import OUTPUT
from luminal.gateway.embedding_batch import embed
from luminal.gateway.embedding_inputs import token_sequences
from luminal.gateway.errors import ApiError
from luminal.gateway.inference_backend import DeploymentRef
from luminal.gateway.metrics import ModelLabels
from luminal.gateway.openai_errors import OpenAIError
from luminal.gateway.platform import Platform
from luminal.gateway.tensor_codec import TensorError, encode_infer_response
from luminal.gateway.text_tensors import parse_text_request
from luminal.scheduler.work import effective_priority

HEADER_LENGTH = "Inference-Header-Content-Length"


async def answer_text_inference(
    platform: Platform, ref: DeploymentRef, name: str, d: dict[str, Any], body: bytes, header_length: str | None
) -> Response:
    labels = ModelLabels.of(name, d["version"], d["id"])
    try:
        parsed = parse_text_request(body, header_length, [OUTPUT])
    except TensorError as e:
        platform.metrics.record_failure(labels, 400, str(e))
        raise
    tokenizer = await run_in_threadpool(platform.embedding_tokenizers.get, d["graph_key"])
    try:
        sequences = await run_in_threadpool(
            token_sequences, parsed.texts, parsed.truncate, tokenizer, d["signature"]["max_seq_length"]
        )
        priority = effective_priority(parsed.request.priority)
        vectors = await embed(platform, ref, labels, sequences, priority)
    except OpenAIError as e:  # the same refusals as the OpenAI route's, in this protocol's error body
        raise ApiError(e.status, e.message.replace('"truncate": true', '"parameters": {"truncate": true}')) from None
    outputs = {OUTPUT: np.stack(vectors).astype(np.float32)}
    payload, json_length = encode_infer_response(name, d["version"], parsed.request, outputs, d["signature"])
    if json_length is None:
        return Response(payload, media_type="application/json")
    return Response(payload, media_type="application/octet-stream", headers={HEADER_LENGTH: str(json_length)})
