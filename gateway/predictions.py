"""Asynchronous predictions: the request is answered 202 at once and executed by a background task of this
gateway process, which stores the result and calls the client's webhook for the events it asked for: "start"
(sent beside the execution, so a slow receiver never delays it) and "completed" (after "start" has been sent).

The inputs live only in the task (never in the database): a restart cannot resume a prediction. Each prediction
records the gateway replica that runs it (its owner); the next start of that replica, or another replica once the
owner's heartbeat expired, marks the ones it cut off failed (gateway/replicas.py). A graceful shutdown waits a
few seconds for running predictions, then cancels the rest and marks them failed the same way.

Results are stored as the OIP JSON response document, binary outputs inlined as JSON `data` (a poll or a webhook
is plain JSON). Up to `INLINE_OUTPUT_BYTES` the document sits in the row's Text column: one read serves a poll,
and the database keeps it with the row. Larger ones go to the artifact store (content-addressed, S3 when
distributed), so a multi-megabyte tensor never bloats the metadata database or its backups. Both are deleted
`prediction_retention_s` after the prediction finished (gateway/sweeps.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from fastapi.responses import JSONResponse

from luminal.gateway.errors import ApiError
from luminal.gateway.inference_backend import DeploymentRef, InferenceBackend
from luminal.gateway.metrics import InferenceMetrics, ModelLabels, observed_infer
from luminal.gateway.prediction_schemas import PredictionAccepted, PredictionPublic
from luminal.gateway.tensor_codec import InferRequest, encode_infer_response
from luminal.gateway.webhooks import COMPLETED, DEFAULT_EVENTS, START, Delivery, WebhookSender
from luminal.scheduler import tracing
from luminal.scheduler.queues.base import QueueFull
from luminal.scheduler.work import InferenceRequest
from luminal.store import predictions as store
from luminal.store.artifacts import ArtifactStore
from luminal.store.database import Database
from luminal.store.tables import Prediction

log = logging.getLogger(__name__)

MiB = 2**20
INLINE_OUTPUT_BYTES = 1 * MiB
# Each unfinished prediction holds its inputs in this process's memory (up to max_request_bytes each), so their
# number is capped; past it a client gets 429 and retries, as with a full queue.
MAX_UNFINISHED = 1024
SHUTDOWN_GRACE_S = 5.0
SHUTDOWN_MESSAGE = "interrupted: the gateway shut down before it finished"
PREDICTION_SPAN = "luminal.prediction"  # from the start of its background task to its result stored and sent


@dataclass(frozen=True)
class PredictionJob:
    """Everything the background task needs, decided and checked by the request that created it."""

    ref: DeploymentRef
    labels: ModelLabels
    request: InferenceRequest
    parsed: InferRequest  # which outputs to answer with, and the client's request id
    model: str
    version: str
    signature: dict[str, Any]
    webhook_url: str | None = None
    webhook_events: frozenset[str] = DEFAULT_EVENTS  # which of START and COMPLETED the webhook receives

    def wants(self, event: str) -> bool:
        return self.webhook_url is not None and event in self.webhook_events


def prefers_async(prefer_headers: list[str]) -> bool:
    """Whether `Prefer` (RFC 7240: comma-separated preferences, each maybe with `=value` and `;params`) asks
    for `respond-async`."""
    for header in prefer_headers:
        for preference in header.split(","):
            token = preference.split(";", 1)[0].split("=", 1)[0].strip().lower()
            if token == "respond-async":
                return True
    return False


def accepted_response(prediction_id: str, preference_applied: bool = False) -> JSONResponse:
    url = f"/v1/predictions/{prediction_id}"
    headers = {"Location": url}
    if preference_applied:
        headers["Preference-Applied"] = "respond-async"
    body = PredictionAccepted(id=prediction_id, status=store.QUEUED, url=url)
    return JSONResponse(body.model_dump(), status_code=202, headers=headers)


def output_text(row: Prediction, artifacts: ArtifactStore) -> str | None:
    if row.output_key is not None:
        return artifacts.local_path(row.output_key).read_text()
    return row.output


class PredictionRunner:
    def __init__(
        self,
        db: Database,
        artifacts: ArtifactStore,
        backend: InferenceBackend,
        metrics: InferenceMetrics,
        webhooks: WebhookSender,
        owner: str | None = None,  # this gateway's replica id, recorded on each prediction it runs
    ):
        self.db, self.artifacts, self.backend, self.metrics = db, artifacts, backend, metrics
        self.webhooks, self.owner = webhooks, owner
        # Kept here, not only in the event loop: the loop holds tasks weakly, and shutdown must find them.
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def unfinished(self) -> int:
        return len(self._tasks)

    async def submit(self, job: PredictionJob, tenant_id: int) -> str:
        """Store the prediction `queued` and start its task; returns its id."""
        if len(self._tasks) >= MAX_UNFINISHED:
            refusal = f"this gateway runs {MAX_UNFINISHED} predictions already; retry shortly"
            self.metrics.record_failure(job.labels, 429, refusal)
            raise ApiError(429, refusal)
        spec = store.PredictionSpec(
            tenant_id, job.ref.deployment_id, job.model, int(job.version), job.webhook_url, self.owner
        )
        prediction_id = await anyio.to_thread.run_sync(self._create, spec)
        # The request's span ends with its 202; the prediction's own span continues its trace.
        run = self._run(prediction_id, job, tracing.current_carrier())
        task = asyncio.create_task(run, name=f"prediction-{prediction_id}")
        self._tasks[prediction_id] = task
        task.add_done_callback(lambda _t: self._tasks.pop(prediction_id, None))
        return prediction_id

    async def shutdown(self, grace_s: float | None = None) -> None:
        """Give running predictions `grace_s` (default SHUTDOWN_GRACE_S) to finish, then cancel the rest and mark
        them failed, so no client polls forever."""
        tasks = dict(self._tasks)
        if not tasks:
            return
        grace = SHUTDOWN_GRACE_S if grace_s is None else grace_s
        _, still_running = await asyncio.wait(tasks.values(), timeout=grace)
        for task in still_running:
            task.cancel()
        await asyncio.gather(*still_running, return_exceptions=True)
        await anyio.to_thread.run_sync(self._fail, list(tasks), SHUTDOWN_MESSAGE)

    # --- the background task ---

    async def _run(self, prediction_id: str, job: PredictionJob, trace: dict[str, str] | None = None) -> None:
        with tracing.continued(PREDICTION_SPAN, trace, {"luminal.prediction.id": prediction_id}):
            started: asyncio.Task[Delivery] | None = None
            try:
                running = await anyio.to_thread.run_sync(self._mark_running, prediction_id)
                if job.wants(START) and running is not None:
                    started = asyncio.create_task(self._notify(prediction_id, job, START, running))
                outcome = await self._execute(job)
                document = await anyio.to_thread.run_sync(self._finish, prediction_id, outcome)
                deliveries = [await started] if started is not None else []  # "start" is sent before "completed"
                if job.wants(COMPLETED) and document is not None:
                    deliveries.append(await self._notify(prediction_id, job, COMPLETED, document))
                if deliveries:
                    await anyio.to_thread.run_sync(self._record_webhook, prediction_id, deliveries)
            except Exception:  # a database failure: logged; the prediction stays unfinished until the next start
                log.exception("prediction %s could not be completed", prediction_id)
            finally:
                if started is not None and not started.done():  # cancelled at shutdown: its delivery goes too
                    started.cancel()

    async def _execute(self, job: PredictionJob) -> store.Outcome:
        try:
            result = await observed_infer(self.metrics, job.labels, self.backend, job.ref, job.request)
        except QueueFull as e:
            return store.Outcome(error=f"rejected: {e}")
        except Exception:
            log.exception("deployment %s: the backend failed a prediction", job.ref.deployment_id)
            return store.Outcome(error="internal error")
        if not result.ok:
            return store.Outcome(error=result.error or "inference failed")
        missing = [n for n in job.parsed.outputs if n not in (result.outputs or {})]
        if missing:  # a backend bug, never the caller's
            log.error("deployment %s: the backend returned no output(s) %s", job.ref.deployment_id, missing)
            return store.Outcome(error="internal error")
        payload = await anyio.to_thread.run_sync(self._encode, job, result.outputs)
        if len(payload) > INLINE_OUTPUT_BYTES:
            key = await anyio.to_thread.run_sync(self.artifacts.put_bytes, payload)
            return store.Outcome(None, output_key=key, billed_seconds=result.billed_seconds)
        return store.Outcome(None, output=payload.decode(), billed_seconds=result.billed_seconds)

    async def _notify(self, prediction_id: str, job: PredictionJob, event: str, document: PredictionPublic) -> Delivery:
        assert job.webhook_url is not None
        # One id per prediction and event, kept across retries, so a receiver can drop a duplicate delivery.
        message_id = f"msg_{prediction_id}_{event}"
        delivery = await self.webhooks.send(job.webhook_url, document.model_dump_json().encode(), message_id)
        if not delivery.delivered:
            attempts, error = delivery.attempts, delivery.error
            log.info("prediction %s: %s webhook failed after %d attempt(s): %s", prediction_id, event, attempts, error)
            delivery = dataclasses.replace(delivery, error=f"{event}: {error}")
        return delivery

    @staticmethod
    def _encode(job: PredictionJob, outputs: dict[str, Any]) -> bytes:
        as_json = dataclasses.replace(job.parsed, binary_outputs=set())  # a stored result is plain JSON
        payload, _ = encode_infer_response(job.model, job.version, as_json, outputs, job.signature)
        return payload

    # --- database steps, each one short transaction, run in a worker thread ---

    def _create(self, spec: store.PredictionSpec) -> str:
        with self.db.session() as session:
            return store.create_prediction(session, spec).id

    def _mark_running(self, prediction_id: str) -> PredictionPublic | None:
        """The prediction as it now stands (what a "start" webhook sends); None when it is gone."""
        with self.db.session() as session:
            store.mark_running(session, prediction_id)
            row = session.get(Prediction, prediction_id)
            return None if row is None else PredictionPublic.of(row, None)

    def _finish(self, prediction_id: str, outcome: store.Outcome) -> PredictionPublic | None:
        with self.db.session() as session:
            row = store.finish_prediction(session, prediction_id, outcome)
            return None if row is None else PredictionPublic.of(row, output_text(row, self.artifacts))

    def _record_webhook(self, prediction_id: str, deliveries: list[Delivery]) -> None:
        """Delivered when every event was; else failed, with the first failure's error."""
        failed = [d for d in deliveries if not d.delivered]
        with self.db.session() as session:
            store.record_webhook(session, prediction_id, not failed, failed[0].error if failed else None)

    def _fail(self, ids: list[str], message: str) -> None:
        with self.db.session() as session:
            store.fail_unfinished(session, message, ids)
