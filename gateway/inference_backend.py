"""Where the gateway sends an inference: behind one small Protocol, so the routers do not know the scheduler
(queues, batching, workers) that answers it.

The platform's backend is the scheduler (gateway/scheduler_backend.py); tests pass their own to `create_app`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from luminal.scheduler.work import InferenceRequest, InferenceResult


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
