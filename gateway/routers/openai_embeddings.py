"""`POST /openai/v1/embeddings`: texts (tokenized here, with the tokenizer the deployment's package carries) or
token ids in, one embedding per input out, as floats or base64 (little-endian float32, as OpenAI sends it).

Each input is its own inference request: the dynamic batcher gathers them, with other callers' inputs, into padded
batches (the graph's sequence dims are paddable), and each executed batch is billed as any other."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from tokenizers import Tokenizer

from luminal.embedding_package import OUTPUT
from luminal.gateway.dependencies import PlatformDep, TenantDep
from luminal.gateway.inference_backend import DeploymentRef
from luminal.gateway.metrics import ModelLabels, observed_infer
from luminal.gateway.openai_embedding_schemas import EmbeddingCreate
from luminal.gateway.openai_errors import OpenAIError, OpenAIRoute
from luminal.gateway.platform import Platform
from luminal.gateway.request_body import read_json_model
from luminal.gateway.routers.inference import deployment_ref, resolve_ready
from luminal.gateway.uploads import EMBEDDING_KIND
from luminal.scheduler.work import InferenceRequest

router = APIRouter(route_class=OpenAIRoute)
MAX_BODY_BYTES = 16 << 20  # 2048 inputs of a few KiB of text each
# Inputs of one request queued at once: a request of 2048 inputs neither overflows its deployment's queue
# (Settings.max_queue_depth) nor takes every place in it from other callers.
MAX_QUEUED_PER_REQUEST = 64


@router.post("/embeddings")
async def create_embeddings(request: Request, tenant: TenantDep, platform: PlatformDep) -> dict[str, Any]:
    body = await read_json_model(request, EmbeddingCreate, MAX_BODY_BYTES)
    d = await resolve_ready(platform, tenant, body.model, None)
    if d["signature"].get("kind") != EMBEDDING_KIND:
        raise OpenAIError(400, f"model {body.model!r} is not an embedding model", "model")
    width = d["signature"]["outputs"][0]["shape"][-1]
    if body.dimensions is not None and body.dimensions != width:  # a model not trained to be cut (Matryoshka)
        message = f"model {body.model!r} gives {width} dimensions; it cannot give {body.dimensions}"
        raise OpenAIError(400, message, "dimensions")
    tokenizer = await run_in_threadpool(platform.embedding_tokenizers.get, d["graph_key"])
    sequences = await run_in_threadpool(token_sequences, body, tokenizer, d["signature"]["max_seq_length"])
    labels = ModelLabels.of(body.model, d["version"], d["id"])
    vectors = await _embed(platform, deployment_ref(tenant, d), labels, sequences)
    data = [
        {"object": "embedding", "index": k, "embedding": _encoded(v, body.encoding_format)}
        for k, v in enumerate(vectors)
    ]
    tokens = sum(len(s) for s in sequences)
    return {"object": "list", "data": data, "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip


def token_sequences(body: EmbeddingCreate, tokenizer: Tokenizer, limit: int) -> list[list[int]]:
    """Each input's token ids: text tokenized with the model's special tokens ([CLS] ... [SEP]), ids as given;
    one longer than `limit` is cut to it when the body asks for `truncate`, and refused otherwise."""
    inputs = body.inputs()
    if isinstance(inputs[0], str):
        encodings = tokenizer.encode_batch(inputs)
        if body.truncate:
            encodings = [_truncated(tokenizer, text, limit) if len(e.ids) > limit else e
                         for text, e in zip(inputs, encodings, strict=True)]  # fmt: skip
        sequences = [e.ids for e in encodings]
    else:
        _check_vocabulary(inputs, tokenizer.get_vocab_size())
        sequences = [ids[:limit] for ids in inputs] if body.truncate else inputs
    too_long = next((k for k, s in enumerate(sequences) if len(s) > limit), None)
    if too_long is not None:
        where = f"input[{too_long}]" if len(inputs) > 1 else "input"
        message = (f"{where} has {len(sequences[too_long])} tokens; this model's maximum is {limit} "
                   '(send "truncate": true to cut longer inputs to it)')  # fmt: skip
        raise OpenAIError(400, message, "input", "context_length_exceeded")
    return sequences


def _truncated(tokenizer: Tokenizer, text: str, limit: int):
    """As transformers truncates: the text's tokens cut so that they and the special tokens fit `limit`."""
    encoding = tokenizer.encode(text, add_special_tokens=False)
    encoding.truncate(limit - tokenizer.num_special_tokens_to_add(False))
    return tokenizer.post_process(encoding)


def _check_vocabulary(inputs: list[list[int]], vocab: int) -> None:
    for k, ids in enumerate(inputs):
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            where = f"input[{k}]" if len(inputs) > 1 else "input"
            raise OpenAIError(400, f"{where}: token ids {bad[:5]} are outside the vocabulary (0..{vocab - 1})", "input")


async def _embed(
    platform: Platform, ref: DeploymentRef, labels: ModelLabels, sequences: list[list[int]]
) -> list[np.ndarray]:
    """One inference request per sequence, at most MAX_QUEUED_PER_REQUEST queued at a time."""
    places = asyncio.Semaphore(MAX_QUEUED_PER_REQUEST)

    async def one(ids: list[int]) -> np.ndarray:
        row = np.asarray([ids], np.int64)
        inputs = {"input_ids": row, "attention_mask": np.ones_like(row)}
        async with places:
            queued = InferenceRequest(ref.deployment_id, ref.tenant_id, inputs, enqueued_at=time.time())
            result = await observed_infer(platform.metrics, labels, platform.backend, ref, queued)
        if not result.ok:
            raise OpenAIError(result.status, result.error or "inference failed")
        return result.outputs[OUTPUT][0]

    return await asyncio.gather(*(one(ids) for ids in sequences))


def _encoded(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode("ascii")
    return vector.astype(np.float32).tolist()
