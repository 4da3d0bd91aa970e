"""`POST /openai/v1/embeddings`: texts (tokenized here, with the tokenizer the deployment's package carries) or
token ids in, one embedding per input out, as floats or base64 (little-endian float32, as OpenAI sends it).

Each input is its own inference request: the dynamic batcher gathers them, with other callers' inputs, into padded
batches (the graph's sequence dims are paddable), and each executed batch is billed as any other."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import PlatformDep, TenantDep
from luminal.gateway.embedding_batch import embed
from luminal.gateway.embedding_dimensions import checked_dimensions, cut
from luminal.gateway.embedding_inputs import token_sequences
from luminal.gateway.metrics import ModelLabels
from luminal.gateway.openai_embedding_schemas import EmbeddingCreate
from luminal.gateway.openai_errors import OpenAIError, OpenAIRoute
from luminal.gateway.request_body import read_json_model
from luminal.gateway.routers.inference import deployment_ref, resolve_ready
from luminal.gateway.traffic_routing import MODEL_VERSION_HEADER
from luminal.gateway.uploads import EMBEDDING_KIND

router = APIRouter(route_class=OpenAIRoute)
MAX_BODY_BYTES = 16 << 20  # 2048 inputs of a few KiB of text each


@router.post("/embeddings")
async def create_embeddings(
    request: Request, response: Response, tenant: TenantDep, platform: PlatformDep
) -> dict[str, Any]:
    body = await read_json_model(request, EmbeddingCreate, MAX_BODY_BYTES)
    d = await resolve_ready(platform, tenant, body.model, None)
    response.headers[MODEL_VERSION_HEADER] = d["version"]
    if d["signature"].get("kind") != EMBEDDING_KIND:
        raise OpenAIError(400, f"model {body.model!r} is not an embedding model", "model")
    dimensions = checked_dimensions(d["signature"], body.model, body.dimensions)
    tokenizer = await run_in_threadpool(platform.embedding_tokenizers.get, d["graph_key"])
    limit = d["signature"]["max_seq_length"]
    sequences = await run_in_threadpool(token_sequences, body.inputs(), body.truncate, tokenizer, limit)
    labels = ModelLabels.of(body.model, d["version"], d["id"])
    vectors = await embed(platform, deployment_ref(tenant, d), labels, sequences)
    normalized = d["signature"].get("normalized", False)
    data = [
        {"object": "embedding", "index": k, "embedding": _encoded(cut(v, dimensions, normalized), body.encoding_format)}
        for k, v in enumerate(vectors)
    ]
    tokens = sum(len(s) for s in sequences)
    return {"object": "list", "data": data, "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip


def _encoded(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode("ascii")
    return vector.astype(np.float32).tolist()
