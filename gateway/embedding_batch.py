"""Embedding sequences through the dynamic batcher: one inference request per sequence, so other callers' inputs
share padded batches with them and each executed batch is billed as any other."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from luminal.embedding_package import OUTPUT
from luminal.gateway.inference_backend import DeploymentRef
from luminal.gateway.metrics import ModelLabels, observed_infer
from luminal.gateway.openai_errors import OpenAIError
from luminal.gateway.platform import Platform
from luminal.scheduler.work import DEFAULT_PRIORITY, InferenceRequest

# Inputs of one request queued at once: a request of 2048 inputs neither overflows its deployment's queue
# (Settings.max_queue_depth) nor takes every place in it from other callers.
MAX_QUEUED_PER_REQUEST = 64


async def embed(
    platform: Platform,
    ref: DeploymentRef,
    labels: ModelLabels,
    sequences: list[list[int]],
    priority: int = DEFAULT_PRIORITY,
) -> list[np.ndarray]:
    """One embedding per sequence, at most MAX_QUEUED_PER_REQUEST queued at a time; a failed one is an
    OpenAIError with the backend's status."""
    places = asyncio.Semaphore(MAX_QUEUED_PER_REQUEST)

    async def one(ids: list[int]) -> np.ndarray:
        row = np.asarray([ids], np.int64)
        inputs = {"input_ids": row, "attention_mask": np.ones_like(row)}
        async with places:
            queued = InferenceRequest(ref.deployment_id, ref.tenant_id, inputs, priority=priority,
                                      enqueued_at=time.time())  # fmt: skip
            result = await observed_infer(platform.metrics, labels, platform.backend, ref, queued)
        if not result.ok:
            raise OpenAIError(result.status, result.error or "inference failed")
        return result.outputs[OUTPUT][0]

    return await asyncio.gather(*(one(ids) for ids in sequences))
