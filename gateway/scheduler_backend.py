"""The platform's inference path: admission into the deployment's queue, a nudge to the provisioner (which
starts a worker when the deployment has none), then the wait for the worker's result. A deployment whose GPU type
no worker can provide is answered 503 with the reason at once: queued, it could only wait for its deadline.

Every request gets a deadline for the start of its execution (the client's `timeout` parameter, capped by
`request_timeout_s`), so a request can never wait unboundedly: past it the queue answers 504 and the request is
never executed. The gateway's own wait adds `execution_timeout_s` for the batch to run.

On the embedded platform a lone request whose deployment's worker thread is idle runs right here, on the event
loop (`scheduler/caller_runs.py`): no thread hand-off there and back. Only when this gateway holds no other
inference, since the loop serves nobody else meanwhile; and requests that arrive together must still reach the
worker together, to be batched: so a request first lets the loop run once, which brings every request that was
already waiting up to here, and then counts who is here.
"""

from __future__ import annotations

import asyncio
import time

from luminal.gateway.inference_backend import DeploymentRef
from luminal.provisioner.provisioner import Provisioner
from luminal.scheduler.caller_runs import CallerRuns
from luminal.scheduler.queues.base import RequestQueue, ResultTimeout
from luminal.scheduler.work import EXPIRED, UNSCHEDULABLE, InferenceRequest, InferenceResult, expired_result

DEADLINE_GRACE_S = 0.05  # a result stored right at the deadline is still returned


class SchedulerBackend:
    def __init__(
        self,
        queue: RequestQueue,
        provisioner: Provisioner,
        max_queue_depth: int,
        request_timeout_s: float,
        execution_timeout_s: float,
        caller_runs: CallerRuns | None = None,  # embedded: idle thread workers let this loop run lone requests
    ):
        self.queue, self.provisioner = queue, provisioner
        self.max_queue_depth = max_queue_depth
        self.request_timeout_s, self.execution_timeout_s = request_timeout_s, execution_timeout_s
        self.caller_runs = caller_runs
        self._in_hand = 0  # inferences between the start of `infer` and their result, on this gateway's loop

    async def infer(self, deployment: DeploymentRef, request: InferenceRequest) -> InferenceResult:
        refusal = self.provisioner.unschedulable(deployment.gpu_type)
        if refusal is not None:
            return InferenceResult(request.id, UNSCHEDULABLE, error=refusal)
        latest = request.enqueued_at + self.request_timeout_s
        request.deadline = latest if request.deadline is None else min(request.deadline, latest)
        self._in_hand += 1
        try:
            return await self._infer(deployment, request)
        finally:
            self._in_hand -= 1

    async def _ran_here(self, deployment_id: int, request: InferenceRequest) -> bool:
        """Whether the request was executed on this loop, in place of an idle worker (its result is then queued)."""
        if self.caller_runs is None or not self.caller_runs.may_run(deployment_id):
            return False
        await asyncio.sleep(0)  # requests already waiting on the loop reach `infer` meanwhile: then none is alone
        return self._in_hand == 1 and self.caller_runs.run(request)

    async def _infer(self, deployment: DeploymentRef, request: InferenceRequest) -> InferenceResult:
        if not await self._ran_here(deployment.deployment_id, request):
            # QueueFull: a 429 with Retry-After (gateway/errors.py)
            await self.queue.enqueue(request, self.max_queue_depth)
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
