"""A language-model worker: serves one LLM deployment until told to stop. It registers, loads the compiled model
(the cold start) into one generation engine, then, round after round: takes sequences from the deployment's
transport while the engine has rows for them, drops those whose clients went away, runs one engine round
(admission or prefill, then a decode step over everything running), and emits the round's events in one call, which
also reads the cancels the next round acts on.
Each sequence that ran is billed when it ends, under this worker's id and the device it runs on. Each heartbeat
it reports its load (running and waiting sequences, free rows and KV blocks, the prompt prefixes its KV pool holds,
which the gateways route by: routing.py) through the transport, and sooner (REPORT_S) after a round that cached
new prefixes, so prompts sharing them find this worker. Between rounds (every ADAPTERS_S) it follows the LoRA
adapters posted for its deployment, loading added ones and retiring removed ones (live_adapters.py), and reports
at once when that changed what it holds.

The engine keeps its own waiting line (priorities, deadlines) for sequences taken but not yet joined (waiting for
cache blocks); the worker takes no more than the batch has rows for, so the rest wait in the transport, where any
worker of the deployment can take them. Told to stop, it takes nothing new and finishes what it holds, and reports
at once that it has no free rows, so routing sends nothing more its way.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from luminal.scheduler import tracing
from luminal.scheduler.billing import UsageLedger
from luminal.scheduler.compute_thread import ComputeThread
from luminal.scheduler.generation.billing import SequenceBilling
from luminal.scheduler.generation.engine import EngineBusy, GenerationEngine
from luminal.scheduler.generation.engines import Engines
from luminal.scheduler.generation.language_model import load_language_model
from luminal.scheduler.generation.stream import Delta, Event, Failed, TokenStream
from luminal.scheduler.live_adapters import LiveAdapters
from luminal.scheduler.registry import UnknownWorker, WorkerInfo, WorkerRegistry
from luminal.scheduler.sequence_spans import SequenceSpans
from luminal.scheduler.sequences.base import SequenceTransport, is_last
from luminal.scheduler.sequences.request import SequenceRequest, WorkerLoad
from luminal.scheduler.sequences.routing import MAX_REPORTED_PREFIXES, short_digest
from luminal.scheduler.worker import HEARTBEAT_S, IDLE_WAIT_S, new_worker_id
from luminal.scheduler.worker_spec import WorkerSpec

log = logging.getLogger(__name__)
REPORT_S = 0.1  # the soonest a report follows the last when the pool cached new prefixes (one Redis write)
# How often it reads its deployment's posted adapters (one Redis read): an added adapter is served this much later.
ADAPTERS_S = 0.2


class _Sink:
    """Where the engine puts one sequence's events: the worker's outbox, emitted after each round."""

    def __init__(self, request_id: str, outbox: list[tuple[str, Event]]):
        self.request_id, self.outbox = request_id, outbox
        self.spans: SequenceSpans | None = None  # set for a traced sequence: it watches the events go by

    def put(self, event: Delta | Failed) -> None:
        self.outbox.append((self.request_id, event))
        if self.spans is not None:
            self.spans.saw(event)


class LanguageModelWorker:
    def __init__(
        self,
        spec: WorkerSpec,
        sequences: SequenceTransport,
        path_of: Callable[[str], Path],  # artifact key -> local file of the compiled model
        ledger: UsageLedger,
        registry: WorkerRegistry,
        worker_id: str | None = None,
        device: str = "cpu",  # the GPU type it runs on: what its sequences are billed as
        engines: Engines | None = None,  # this process's list of running engines, where it shows its own
        compute: ComputeThread | None = None,  # where the model's CPU programs run (None: on this thread)
    ):
        self.spec, self.sequences, self.path_of = spec, sequences, path_of
        self.ledger, self.registry, self.engines, self.compute = ledger, registry, engines, compute
        self.worker_id = worker_id or new_worker_id(spec.deployment_id)
        self.device = device
        self.ready = threading.Event()
        self.engine: GenerationEngine | None = None
        self.adapters = LiveAdapters(spec.deployment_id, sequences.adapters, path_of)
        self._live: dict[str, TokenStream] = {}  # the sequences it took and has not ended, by request id
        self._outbox: list[tuple[str, Event]] = []
        self._reported_mark: tuple[int, bytes | None] = (0, None)  # `_prefix_mark()` when it last reported
        self._generated = 0  # tokens it emitted since it started
        self._reported_tokens = (0, time.monotonic())  # `_generated` when it last reported, and when
        # Its registration's started_at, sent with each take: which process under `worker_id` took a sequence.
        self.started_at: float | None = None
        self.draining = False  # told to stop: it takes nothing more and finishes what it holds

    def run(self, stop: threading.Event) -> None:
        started = self.started_at = time.time()
        info = WorkerInfo(worker_id=self.worker_id, deployment_id=self.spec.deployment_id, pid=os.getpid(),
                          host=socket.gethostname(), device=self.device, started_at=started)  # fmt: skip
        self.registry.register(info)
        try:
            self.engine = self._on_compute(self._load)
            # Its load is reported before it says it is ready: a sequence sent to it as soon as it is ready finds
            # the report, while a preferred worker without one counts as gone and others may take its sequences.
            self._report()
            self.registry.mark_ready(self.worker_id)
            if self.engines is not None:
                self.engines.add(self.spec.program_key, self.engine)
            self.ready.set()
            log.info("language-model worker %s ready after %.3f s", self.worker_id, time.time() - started)
            self._serve(stop)
        finally:
            self.sequences.report(self.spec.deployment_id, self.worker_id, None)
            if self.engine is not None:
                if self.engines is not None:
                    self.engines.remove(self.engine)
                self.engine.close()  # fails whatever it still held (only after an error: a stop drains it)
                self._flush()
            self.registry.deregister(self.worker_id)

    def _load(self) -> GenerationEngine:
        model = load_language_model(self.path_of(self.spec.program_key), compute=self.compute)
        billing = SequenceBilling(self.ledger, self.worker_id, self.device)
        engine = GenerationEngine(model, self.spec.max_waiting, billing, prefill_chunk=self.spec.prefill_chunk)
        self.adapters.start(engine, self.spec.lora_adapters)  # added to the live deployment after its compile
        return engine

    def _on_compute(self, fn: Callable[[], GenerationEngine]) -> GenerationEngine:
        """`fn()` on the process's compute thread, where one is given. Loading runs native code that can start an
        OpenMP team on the thread calling it; this worker thread lives on, and with a second team alive libgomp
        stops spinning between parallel regions, so every program of the process slows (a tiny model's decode
        step about 50x here; scheduler/compute_thread.py)."""
        return fn() if self.compute is None else self.compute.call(fn)

    def _serve(self, stop: threading.Event) -> None:
        engine = self.engine
        last_beat = last_report = last_adapters = time.monotonic()
        cancelled: set[str] = set()  # read with the last round's events: dropped before this round runs
        while not stop.is_set() or engine.busy:
            held = len(engine.running) + len(engine.prefilling) + len(engine.waiting)
            room = 0 if stop.is_set() else engine.model.max_batch - held
            if room > 0:
                wait = 0.0 if engine.busy else IDLE_WAIT_S
                taken = self.sequences.take(self.spec.deployment_id, self.worker_id, room, wait, self.started_at)
                for request in taken:
                    self._start(request)
            for request_id in cancelled & self._live.keys():
                self._live[request_id].cancel()
            if engine.busy:
                engine.run_once()
            cancelled = self._flush()
            now = time.monotonic()
            if stop.is_set() and not self.draining:
                # At once, not at the next heartbeat: a sequence routed to it meanwhile would wait out its grace
                # (routing.PREFERENCE_GRACE_S) before another worker took it, and a drain lasts its sequences' time.
                self.draining, last_report = True, now
                self._report()
            if now - last_adapters >= ADAPTERS_S:
                last_adapters = now
                if self.adapters.follow(engine):
                    last_report = now
                    self._report()
            if now - last_beat >= HEARTBEAT_S:
                last_beat = last_report = now
                self._heartbeat(stop)
                self._report()
            elif now - last_report >= REPORT_S and self._prefix_mark() != self._reported_mark:
                last_report = now
                self._report()

    def _start(self, request: SequenceRequest) -> None:
        """Hand a taken sequence to the engine (its waiting deadline still counted from its request's arrival)."""
        sink = _Sink(request.id, self._outbox)
        try:
            stream = self.engine.submit(
                list(request.prompt),
                request.params,
                sink,
                request.account,
                request.priority,
                request.timeout_s,
                request.waited_s(),
            )
        except (ValueError, EngineBusy) as e:  # a prompt the pool can never hold (PromptTooLong), a full line
            self._outbox.append((request.id, Failed(str(e))))
            return
        self._live[request.id] = stream
        if request.trace and tracing.enabled():
            sink.spans = SequenceSpans(request, stream, self.spec, self.worker_id, lambda: len(self.engine.running))

    def _flush(self) -> set[str]:
        """Emit the round's events and learn which of the sequences still running were cancelled, in one call (one
        round trip on Redis); forget the sequences the events end. Returns the cancelled ones."""
        events, self._outbox[:] = [self._with_compute(*item) for item in self._outbox], []
        for request_id, event in events:
            if is_last(event):
                self._live.pop(request_id, None)
        self._generated += sum(isinstance(event, Delta) for _, event in events)
        if not events and not self._live:
            return set()
        return self.sequences.emit(events, watch=list(self._live))

    def _with_compute(self, request_id: str, event: Event) -> tuple[str, Event]:
        """The event, a delta stamped with its sequence's compute so far: what the gateway bills should this
        process die before the sequence ends (relay.py)."""
        stream = self._live.get(request_id)
        if isinstance(event, Delta) and stream is not None:
            event = dataclasses.replace(event, compute_s=stream.compute_s)
        return request_id, event

    def _report(self) -> None:
        """Tell the transport what this worker holds: its sequences, free rows, its KV pool's free blocks and the
        prefixes it caches, the prompt tokens it reused so far, and its tokens per second since the last report."""
        engine = self.engine
        pool = getattr(engine.batch, "pool", None)
        held = len(engine.running) + len(engine.prefilling)
        self._reported_mark, prefixes = self._prefix_mark(), self._prefixes()
        (tokens_then, then), now = self._reported_tokens, time.monotonic()
        self._reported_tokens = (self._generated, now)
        load = WorkerLoad(
            held, len(engine.waiting), None if pool is None else pool.blocks - pool.in_use,
            free_rows=0 if self.draining else max(0, engine.model.max_batch - held - len(engine.waiting)),
            block_size=None if pool is None else pool.block_size,
            prefixes=prefixes, reused_tokens=0 if pool is None else pool.reused_tokens,
            kv_blocks=None if pool is None else pool.blocks,
            tokens_per_s=(self._generated - tokens_then) / (now - then) if now > then else 0.0,
            adapters=self._adapters(), adapter_slots_free=self._free_slots(),
            adapter_errors=self.adapters.errors(),
        )  # fmt: skip
        self.sequences.report(self.spec.deployment_id, self.worker_id, load)

    def _adapters(self) -> tuple[tuple[str, str], ...]:
        """The LoRA adapters its engine serves now, with their prefix-cache namespaces (routing.py reads both)."""
        bank = self.engine.model.lora
        if bank is None:
            return ()
        return tuple(sorted((name, bank.cache_namespace(slot).decode()) for name, slot in bank.slots.items()))

    def _free_slots(self) -> int | None:
        bank = self.engine.model.lora
        return None if bank is None else bank.layout.slots - 1 - len(bank.slots) - len(bank.retiring)

    def _prefix_mark(self) -> tuple[int, bytes | None]:
        """Changes when the pool publishes or gives up a prefix (cheap, checked every round): how many it holds
        and the newest."""
        index = getattr(getattr(self.engine.batch, "pool", None), "index", {})
        return len(index), next(reversed(index), None)

    def _prefixes(self) -> tuple[str, ...]:
        """The reported form of the prefixes its pool holds or caches, the most recently published last kept."""
        pool = getattr(self.engine.batch, "pool", None)
        digests = [] if pool is None else pool.cached_prefixes()[-MAX_REPORTED_PREFIXES:]
        return tuple(short_digest(d) for d in digests)

    def _heartbeat(self, stop: threading.Event) -> None:
        try:
            self.registry.heartbeat(self.worker_id)
        except UnknownWorker:  # taken for dead and replaced (see worker.py): step down
            log.warning("worker %s was deregistered: stopping", self.worker_id)
            stop.set()
