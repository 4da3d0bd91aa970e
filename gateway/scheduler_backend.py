"""The platform's inference path: admission into the deployment's queue, a nudge to the provisioner (which
starts a worker when the deployment has none), then the wait for the worker's result.

Every request gets a deadline for the start of its execution (the client's `timeout` parameter, capped by
`request_timeout_s`), so a request can never wait unboundedly: past it the queue answers 504 and the request is
never executed. The gateway's own wait adds `execution_timeout_s` for the batch to run.
"""

from __future__ import annotations

import time

from luminal.gateway.inference_backend import DeploymentRef
from luminal.provisioner.provisioner import Provisioner
from luminal.scheduler.queues.base import RequestQueue, ResultTimeout
from luminal.scheduler.work import EXPIRED, InferenceRequest, InferenceResult


class SchedulerBackend:
    def __init__(
        self,
        queue: RequestQueue,
        provisioner: Provisioner,
        max_queue_depth: int,
        request_timeout_s: float,
        execution_timeout_s: float,
    ):
        self.queue, self.provisioner = queue, provisioner
        self.max_queue_depth = max_queue_depth
        self.request_timeout_s, self.execution_timeout_s = request_timeout_s, execution_timeout_s

    async def infer(self, deployment: DeploymentRef, request: InferenceRequest) -> InferenceResult:
        latest = request.enqueued_at + self.request_timeout_s
        request.deadline = latest if request.deadline is None else min(request.deadline, latest)
        self.queue.submit(request, self.max_queue_depth)  # QueueFull: a 429 with Retry-After (gateway/errors.py)
        self.provisioner.notify(deployment.deployment_id)
        wait = max(0.0, request.deadline - time.time()) + self.execution_timeout_s
        try:
            return await self.queue.wait_result(request.id, wait)
        except ResultTimeout:
            return InferenceResult(request.id, EXPIRED, error=f"no result within {wait:.1f} s")
