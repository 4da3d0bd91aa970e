"""Where the gateway sends an inference: behind one small Protocol, so the direct call and the scheduler
(queues, batching, workers) are interchangeable without touching the routers.

`DirectBackend` runs the deployment's compiled program in a thread of this process, one request at a time
(no batching, no queue): the anchor `bench/serve.py` compares the platform against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import anyio.to_thread

from luminal.gateway.store.artifacts import ArtifactStore
from luminal.scheduler.programs import InvalidInput, ProgramCache
from luminal.scheduler.work import EXPIRED, INVALID_INPUT, OK, InferenceRequest, InferenceResult

__all__ = ["DeploymentRef", "DirectBackend", "InferenceBackend", "InvalidInput"]


@dataclass(frozen=True)
class DeploymentRef:
    """What an inference needs to know about its deployment (a plain value, safe to pass between threads)."""

    deployment_id: int
    tenant_id: int
    program_key: str
    gpu_type: str = "cpu"
    max_batch_size: int = 1
    max_queue_delay_ms: int = 0


class InferenceBackend(Protocol):
    async def infer(self, deployment: DeploymentRef, request: InferenceRequest) -> InferenceResult:
        """The request's result; a failure the caller should see is a result with its status and error."""
        ...


class DirectBackend:
    def __init__(self, artifacts: ArtifactStore, max_loaded: int = 16):
        self.programs = ProgramCache(artifacts.local_path, max_loaded)

    def _run(self, key: str, request: InferenceRequest) -> InferenceResult:
        started = time.time()
        if request.expired(started):
            return InferenceResult(request.id, EXPIRED, error="the request's timeout passed before it ran")
        try:
            outputs = self.programs.get(key).run(request.inputs)
        except InvalidInput as e:
            return InferenceResult(request.id, INVALID_INPUT, error=str(e))
        elapsed = time.time() - started
        return InferenceResult(
            request.id,
            OK,
            outputs,
            batch_size=1,
            batch_leader=True,
            queue_seconds=started - request.enqueued_at,
            compute_seconds=elapsed,
            billed_seconds=elapsed,
        )

    async def infer(self, deployment: DeploymentRef, request: InferenceRequest) -> InferenceResult:
        return await anyio.to_thread.run_sync(self._run, deployment.program_key, request)
