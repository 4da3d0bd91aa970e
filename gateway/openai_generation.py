"""What the completion and chat routes share: the named deployment's tokenizer and context length, the request's
sampling parameters, and the answer, whole or as server-sent events in the chunks the `openai` client parses.

The gateway holds no model: a sequence goes through the platform's sequence transport to a worker of the deployment
holding its engine (scheduler/llm_worker.py), routed to the one caching the longest prefix of its prompt, else the
least loaded, among those holding its LoRA adapter if it names one (scheduler/sequences/routing.py), and its events
come back the same way (RelayedStream). A sequence for an adapter is always routed so, and is queued only once a
worker reports holding the adapter (adapter_wait.py: an adapter added live reaches the workers a moment later).

A streamed answer is a series of `data: {chunk}` events ending in `data: [DONE]`; with
stream_options.include_usage the last chunk before [DONE] has no choices and carries the usage (and every other
chunk `"usage": null`), as OpenAI sends them. A client that goes away cancels its sequence, whether or not a
token was read yet: the worker's engine drops it (and its cache rows) before its next step, and bills only what
it generated.

A sequence waits for a place in the batch at its `priority` for at most its `queue_timeout` (capped by the
platform's request_timeout_s, the wait an inference request is allowed), counted from the request's arrival (as
an inference request's deadline is); past it the answer is a 504, as for an expired inference request, or an
error event when the stream has started. A full waiting line (the deployment's max_waiting) is a 429.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from luminal.gateway.adapter_wait import await_adapter
from luminal.gateway.generation_metrics import GenerationMetrics, SequenceTimer
from luminal.gateway.lora_models import base_of
from luminal.gateway.metrics import ModelLabels
from luminal.gateway.openai_errors import OpenAIError
from luminal.gateway.openai_schemas import SamplingFields, SchedulingFields
from luminal.gateway.platform import Platform
from luminal.gateway.routers.inference import resolve_ready
from luminal.gateway.traffic_routing import MODEL_VERSION_HEADER
from luminal.gateway.uploads import LLM_KIND
from luminal.scheduler import tracing
from luminal.scheduler.billing import UsageLedger
from luminal.scheduler.generation.engine import PromptTooLong, check_length
from luminal.scheduler.generation.logprobs import TokenLogprob
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account, Delta, GenerationFailed, WaitExpired
from luminal.scheduler.generation.tokenizer import TextCodec
from luminal.scheduler.registry import WorkerRegistry
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.sequences.relay import RelayedStream
from luminal.scheduler.sequences.request import SequenceRequest
from luminal.scheduler.sequences.routing import choose_worker
from luminal.scheduler.work import effective_priority
from luminal.store.errors import NotFound
from luminal.store.tables import Tenant

DISCONNECT_POLL_S = 0.25  # how often a non-streamed request checks that its client is still there
CLIENT_CLOSED = 499  # the status of an answer whose client went away first (nginx's; nobody reads it)
# A language-model worker heartbeats every second between rounds (each a few milliseconds): one silent this long
# is dead or hung, and the sequence it was generating ends (or goes to another worker, had it sent nothing).
WORKER_SILENT_S = 15.0


@dataclass(frozen=True)
class Served:
    """A request's language model: where its sequences go, its tokenizer and context, whom they are billed to."""

    sequences: SequenceTransport
    codec: TextCodec
    max_positions: int  # prompt plus generated tokens of one sequence
    tenant_id: int
    name: str
    deployment: dict[str, Any]
    metrics: GenerationMetrics
    max_wait_s: float  # the longest a sequence waits for a place in a batch (Settings.request_timeout_s)
    notify: Callable[[int], None]  # tells the provisioner a sequence was queued for a deployment (by id)
    registry: WorkerRegistry | None  # whether the worker running a sequence still lives (None: not watched)
    cut_short_ledger: UsageLedger  # bills what a worker delivered before it died
    prefix_routing: bool  # route each sequence to a worker (routing.py), or let any worker take it
    lora: str | None = None  # the LoRA adapter the request named as its model (None: the base model)

    async def start(
        self, prompt: list[int], params: SamplingParams, scheduling: SchedulingFields, arrived: float
    ) -> tuple[RelayedStream, SequenceTimer]:
        """Queue the sequence under a new request id for a worker of the deployment (EngineBusy when its waiting
        line is full). `arrived`: the request's arrival (time.perf_counter), which its waiting deadline counts
        from. The submit (a Redis call) runs off the event loop: a slow one stalls this request, not every stream."""
        check_length(prompt, params.max_tokens, self.max_positions)  # the pool's fit is checked by the worker
        params = replace(params, lora=self.lora)
        d = self.deployment
        account = Account(uuid.uuid4().hex, d["id"], self.tenant_id, d["gpu_type"], self.name, int(d["version"]))
        wait = self.max_wait_s if scheduling.queue_timeout is None else min(scheduling.queue_timeout, self.max_wait_s)
        priority, waited = effective_priority(scheduling.priority), max(0.0, time.perf_counter() - arrived)
        arrived_at = time.time() - waited
        trace = tracing.current_carrier()  # the worker's spans of the sequence join this request's trace
        if self.lora is not None:
            await await_adapter(self.sequences, d["id"], self.lora)

        def queue() -> SequenceRequest:  # blocking transport reads and writes: off the event loop
            preferred = None
            if self.prefix_routing or self.lora is not None:  # an adapter's sequence only to a worker holding it
                loads, backlog = self.sequences.recent_loads(d["id"]), self.sequences.backlog(d["id"])
                preferred = choose_worker(prompt, loads, backlog, adapter=self.lora)
            request = SequenceRequest(
                account, tuple(prompt), params, priority, wait, arrived_at, preferred_worker=preferred, trace=trace
            )
            self.sequences.submit(request, d["max_waiting"])
            return request

        request = await asyncio.to_thread(queue)
        self.notify(d["id"])  # queued first: a deployment scaled to zero starts its first worker on seeing it
        alive = None if self.registry is None else partial(worker_alive, self.registry, d["id"])
        relayed = RelayedStream(self.sequences, request, alive, d["max_waiting"], bill=self.cut_short_ledger.record)
        return relayed, self.metrics.sequence(ModelLabels.of(self.name, d["version"], d["id"]), arrived)


async def language_model(platform: Platform, tenant: Tenant, name: str) -> Served:
    """The tenant's deployed language model `name`, or the base serving LoRA adapter `name` (404 unknown, 400
    not an LLM, 503 no worker can serve it)."""
    lora = None
    try:
        d = await resolve_ready(platform, tenant, name, None)
    except NotFound:
        base = await run_in_threadpool(base_of, platform.db, tenant, name)
        if base is None:
            raise
        d, lora = await resolve_ready(platform, tenant, base, None), name
    if d["signature"].get("kind") != LLM_KIND:
        raise OpenAIError(400, f"model {name!r} is not a language model (serve it with /v2/models)", "model")
    if platform.sequences is None:
        raise OpenAIError(503, "this gateway serves no language models (it was started without a scheduler)")
    refusal = platform.unschedulable(d["gpu_type"])
    if refusal is not None:
        raise OpenAIError(503, f"model {name!r} cannot be served: {refusal}")
    codec, max_positions = await run_in_threadpool(platform.language_models.get, d["program_key"])
    metrics, max_wait_s = platform.generation_metrics, platform.settings.request_timeout_s
    notify = platform.provisioner.notify if platform.provisioner is not None else lambda deployment_id: None
    return Served(platform.sequences, codec, max_positions, tenant.id, name, d, metrics, max_wait_s, notify,
                  platform.registry, platform.cut_short_ledger, platform.settings.prefix_routing, lora)  # fmt: skip


def worker_alive(registry: WorkerRegistry, deployment_id: int, worker_id: str, started_at: float | None) -> bool:
    """Whether the process that took a sequence (`worker_id`, registered with `started_at`: Started's
    worker_started_at) is registered for the deployment and heartbeated lately. Another registration under the id
    is the worker restarted under its old name (a pod's container restarted in place, a VM's service by systemd),
    which never saw the sequence. The two started_at are the worker's own values, compared for equality only: the
    gateway's clock may differ from the worker's. None (an older worker's Started): any registration under the id
    counts. Blocking: a registry read."""
    info = next((w for w in registry.workers(deployment_id) if w.worker_id == worker_id), None)
    if info is None or (started_at is not None and info.started_at != started_at):
        return False
    return time.time() - info.last_heartbeat < WORKER_SILENT_S


def check_token_ids(codec: TextCodec, ids: list[int], param: str) -> None:
    vocab = codec.tokenizer.get_vocab_size()
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise OpenAIError(400, f"token ids {bad[:5]} are outside the vocabulary (0..{vocab - 1})", param)


def sampling_params(body: SamplingFields, max_tokens: int | None, prompt: list[int], context: int) -> SamplingParams:
    """max_tokens None: whatever the context leaves after the prompt."""
    if max_tokens is None:
        max_tokens = context - len(prompt)
        if max_tokens < 1:
            raise PromptTooLong(f"the prompt has {len(prompt)} tokens; this model's context is {context}")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        stop=body.stops(),
        stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos,
        logprobs=body.top_logprobs_count(),
    )


@dataclass
class Answer:
    """One request's generation and how its chunks are shaped (completions and chat differ only there)."""

    model: str
    started: tuple[RelayedStream, SequenceTimer]  # what Served.start returns
    id_prefix: str
    chunk_object: str
    # (text, finish_reason, logprobs) -> a streamed choice (None: nothing to send yet, as for a held tool call)
    choice: Callable[[str, str | None, dict[str, Any] | None], dict[str, Any] | None]
    first: dict[str, Any] | None = None  # a choice sent before any text (chat's assistant role)
    # Formats tokens' logprobs in the endpoint's shape (openai_logprobs.py); None when not asked for.
    logprobs: Callable[[list[TokenLogprob]], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        self.stream, self.timer = self.started
        request_id = self.stream.account.request_id if self.stream.account else uuid.uuid4().hex
        self.id = f"{self.id_prefix}-{request_id}"  # the id usage records bill the request under
        self.created = int(time.time())

    def usage(self) -> dict[str, int]:
        prompt, completion = self.stream.prompt_tokens, self.stream.completion_tokens
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def envelope(self, obj: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices, **extra}

    async def collect(self, request: Request) -> tuple[str, str | None, dict[str, Any] | None]:
        """The whole text, finish reason and logprobs (None when not asked for). A client that disconnects first
        cancels the sequence, and the answer ends at once (a 499 nobody reads) rather than waiting on a sequence
        that will never end, or only at its waiting deadline."""
        reading = asyncio.ensure_future(self._whole())
        watcher = asyncio.create_task(_disconnected(request))
        try:
            await asyncio.wait({reading, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                raise OpenAIError(CLIENT_CLOSED, "the client closed the connection before the answer was complete")
            return reading.result()
        finally:
            watcher.cancel()
            reading.cancel()
            self.stream.cancel()  # a no-op for a finished sequence

    async def _whole(self) -> tuple[str, str | None, dict[str, Any] | None]:
        try:
            parts, reason, tokens = [], None, []
            async for delta in self._timed():
                parts.append(delta.text)
                reason = delta.finish_reason
                if delta.logprob is not None:
                    tokens.append(delta.logprob)
            return "".join(parts), reason, self._logprobs(tokens)
        except GenerationFailed as e:
            raise _failure(e) from None

    async def _timed(self) -> AsyncIterator[Delta]:
        """The stream's deltas, each token's time observed; the tokens counted when it ends (its prompt only if it
        was read: a sequence that expired or was cancelled while waiting never ran)."""
        try:
            async for delta in self.stream:
                self.timer.token(time.perf_counter())
                yield delta
        finally:
            read = self.stream.prompt_tokens if self.stream.started_at is not None else 0
            self.timer.ended(read, self.stream.completion_tokens)

    def _logprobs(self, tokens: list[TokenLogprob]) -> dict[str, Any] | None:
        return None if self.logprobs is None else self.logprobs(tokens)

    def headers(self) -> dict[str, str]:
        """Which version of the model generates this answer (its traffic split chose it when none was named)."""
        account = self.stream.account
        return {} if account is None else {MODEL_VERSION_HEADER: str(account.model_version)}

    def sse(self, include_usage: bool) -> StreamingResponse:
        return _CancellingStream(self._events(include_usage), self.stream, self.headers())

    async def _events(self, include_usage: bool) -> AsyncIterator[str]:
        usage = {"usage": None} if include_usage else {}
        try:
            if self.first is not None:
                yield _event(self.envelope(self.chunk_object, [self.first], **usage))
            pending: list[TokenLogprob] = []  # tokens whose text is held back ride on the next chunk sent
            async for delta in self._timed():
                if delta.logprob is not None:
                    pending.append(delta.logprob)
                if delta.text or delta.finish_reason:
                    choice = self.choice(delta.text, delta.finish_reason, self._logprobs(pending))
                    if choice is not None:
                        pending = []
                        yield _event(self.envelope(self.chunk_object, [choice], **usage))
            if include_usage:
                yield _event(self.envelope(self.chunk_object, [], usage=self.usage()))
        except GenerationFailed as e:
            yield _event(_failure(e).body())
        finally:
            self.stream.cancel()  # the client went away mid-stream (or the stream ended: then a no-op)
        yield "data: [DONE]\n\n"


def _failure(e: GenerationFailed) -> OpenAIError:
    """A sequence that waited past its deadline is a 504 (as an expired inference request); any other failure
    is ours, a 500."""
    if isinstance(e, WaitExpired):
        return OpenAIError(504, str(e), None, "timeout")
    return OpenAIError(500, str(e))


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone away."""
    while not await request.is_disconnected():
        await asyncio.sleep(DISCONNECT_POLL_S)


class _CancellingStream(StreamingResponse):
    """Server-sent events that cancel their sequence however the response ends. The body's own `finally` does not
    cover a client gone before the first chunk was asked for: Starlette then cancels the response before it starts
    the body, so none of the body's code runs, and the sequence would run (and bill) to its end unread."""

    def __init__(self, body: AsyncIterator[str], stream: RelayedStream, headers: dict[str, str]):
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.stream.cancel()  # a no-op for a sequence that ended
