"""The platform's inference path: admission into the deployment's queue, a nudge to the provisioner (which
starts a worker when the deployment has none), then the wait for the worker's result. A deployment whose GPU type
no worker can provide is answered 503 with the reason at once: queued, it could only wait for its deadline.

Every request gets a deadline for the start of its execution (the client's `timeout` parameter, capped by
`request_timeout_s`), so a request can never wait unboundedly: past it the queue answers 504 and the request is
never executed. The gateway's own wait adds `execution_timeout_s` for the batch to run.
"""

from __future__ import annotations

import time

from luminal.gateway.inference_backend import DeploymentRef
from luminal.provisioner.provisioner import Provisioner
from luminal.scheduler import tracing
from luminal.scheduler.queues.base import RequestQueue, ResultTimeout
from luminal.scheduler.work import EXPIRED, UNSCHEDULABLE, InferenceRequest, InferenceResult, expired_result

DEADLINE_GRACE_S = 0.05  # a result stored right at the deadline is still returned
DISPATCH = "luminal.dispatch"  # the span from admission into the queue until the worker's result is back


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
        # Its span covers the queue round trip; the worker's spans (batch_spans.py) are its children.
        with tracing.stage(DISPATCH, {"luminal.deployment.id": deployment.deployment_id}):
            request.trace = tracing.current_carrier()
            result = await self._dispatch(deployment, request)
            tracing.set_attributes({"luminal.status": result.status, "luminal.request.id": result.request_id})
            return result

    async def _dispatch(self, deployment: DeploymentRef, request: InferenceRequest) -> InferenceResult:
        refusal = self.provisioner.unschedulable(deployment.gpu_type)
        if refusal is not None:
            return InferenceResult(request.id, UNSCHEDULABLE, error=refusal)
        latest = request.enqueued_at + self.request_timeout_s
        request.deadline = latest if request.deadline is None else min(request.deadline, latest)
        await self.queue.enqueue(request, self.max_queue_depth)  # QueueFull: a 429 with Retry-After (gateway/errors.py)
        self.provisioner.notify(deployment.deployment_id)
        until_deadline = max(0.0, request.deadline - time.time()) + DEADLINE_GRACE_S
        try:
            return await self.queue.wait_result(request.id, until_deadline)
        except ResultTimeout:
            pass
        # Past the deadline a queued request can never start (take() and the executor drop it), so unless some
        # request of the deployment is executing (it may be this one) the answer is 504 now, not after the
        # execution allowance: a deployment whose workers cannot start must not hold its callers.
        if self.queue.in_flight(deployment.deployment_id) == 0:
            try:  # completed in the instant between the two checks
                return await self.queue.wait_result(request.id, DEADLINE_GRACE_S)
            except ResultTimeout:
                return expired_result(request)
        try:
            return await self.queue.wait_result(request.id, self.execution_timeout_s)
        except ResultTimeout:
            return InferenceResult(
                request.id, EXPIRED, error=f"no result {self.execution_timeout_s:g} s after its deadline"
            )
