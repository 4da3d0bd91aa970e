"""The provisioner: keeps each ready deployment's workers between its min and max replicas, following its load.

A loop thread reconciles every deployment each tick: dead workers are dropped (what they held is reclaimed
from the queue by the survivors), the autoscaler's decision is applied (start workers, or stop the newest),
and cold-start times are recorded. A deployment whose GPU type the backend cannot provide gets no workers at all
(never a worker on another device); `unschedulable` gives the reason the gateway shows. The gateway calls
`notify` on every request, which also wakes the loop at once, so a deployment scaled to zero starts its first
worker without waiting for the next tick.

When several gateways share one queue, only the provisioner that holds the provisioner lease (`lease`) acts: the
others tick without scaling, and one that loses the lease makes no further change (each start or stop asks first).
Workers that outlive their gateway (a cluster's, a cloud's) keep serving the shared queue and the new holder takes
them over; local worker processes stop with the gateway that started them (no other one could ever stop them),
and the new holder starts its own.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass

from luminal.provisioner.autoscaler import Load, ScalingPolicy, desired_replicas
from luminal.provisioner.backends import WorkerBackend, WorkerHandle
from luminal.provisioner.tenant_limits import (
    UNLIMITED,
    TenantDeployment,
    TenantLimits,
    held_by_others,
    limited_replicas,
)
from luminal.scheduler.queues.base import RequestQueue
from luminal.scheduler.registry import WorkerInfo, WorkerRegistry
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.worker_spec import WorkerSpec
from luminal.store.clock import SYSTEM_CLOCK, Clock
from luminal.store.leases import LeaseKeeper

log = logging.getLogger(__name__)
COLD_STARTS_KEPT = 32
MAX_RESTART_BACKOFF_S = 30.0


@dataclass(frozen=True)
class ProvisionerSettings:
    tick_s: float = 0.25
    refresh_s: float = 2.0  # how often the list of ready deployments is re-read from the database
    target_per_replica: float = 16.0  # queued + in-flight requests per replica before another one starts
    idle_to_zero_s: float = 300.0
    scale_up_cooldown_s: float = 2.0
    scale_down_cooldown_s: float = 30.0
    stop_grace_s: float = 30.0
    # A ready worker whose heartbeat is older than this is hung (it heartbeats between batches, so this must
    # exceed the longest batch): it is stopped, deregistered, and replaced; what it held is reclaimed.
    heartbeat_timeout_s: float = 330.0


@dataclass
class _State:
    last_activity: float
    last_scale_up: float = float("-inf")
    last_scale_down: float = float("-inf")
    # Workers that died before they were ready (a program that cannot load): restarts back off exponentially
    # instead of spinning, until one becomes ready.
    failed_starts: int = 0
    no_start_before: float = float("-inf")


class Provisioner:
    def __init__(
        self,
        ready_specs: Callable[[], list[WorkerSpec]],
        queue: RequestQueue,
        registry: WorkerRegistry,
        backend: WorkerBackend,
        settings: ProvisionerSettings | None = None,
        clock: Clock = SYSTEM_CLOCK,  # idle times, cooldowns, backoffs and the tick; tests step their own
        tenant_limits: Callable[[], dict[int, TenantLimits]] = dict,
        lease: LeaseKeeper | None = None,  # None: the only provisioner (its queue is its own)
        sequences: SequenceTransport | None = None,  # where language models' sequences wait: their load
    ):
        # Every deployment that can serve, read fresh (from the metadata store) each `refresh_s`.
        self.ready_specs = ready_specs
        self.queue, self.registry, self.backend = queue, registry, backend
        self.sequences = sequences
        self.settings = settings or ProvisionerSettings()
        self.clock = clock
        # Suspensions and replica quotas by tenant id (tenants without either are absent), read with the specs.
        self.tenant_limits = tenant_limits
        self.lease = lease
        self._limits: dict[int, TenantLimits] = {}
        self._workers: dict[int, list[WorkerHandle]] = defaultdict(list)
        self._states: dict[int, _State] = {}
        self._cold_starts: dict[int, deque[float]] = defaultdict(lambda: deque(maxlen=COLD_STARTS_KEPT))
        self._noted: set[str] = set()  # workers whose cold start is recorded
        self._hung: set[str] = set()  # ready workers whose heartbeats stopped, as of this tick
        self._refused: set[int] = set()  # deployments whose GPU type the backend lacks, logged once each
        self._specs: dict[int, WorkerSpec] = {}
        self._specs_read_at = float("-inf")
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="provisioner", daemon=True)

    # --- called by the gateway ---
    def start(self) -> None:
        self._thread.start()

    def notify(self, deployment_id: int) -> None:
        """A request arrived for the deployment: it is active, and may need its first worker now. The loop is
        woken only then (no worker, or a deployment it has not seen): waking it on every request would run a
        reconcile per request beside the serving threads."""
        with self._lock:
            state = self._states.get(deployment_id)
            if state is not None:
                state.last_activity = self.clock.monotonic()
            if deployment_id not in self._specs:
                self._specs_read_at = float("-inf")  # deployed since the last read: re-read at once
            elif self._workers.get(deployment_id):
                return
        self._wake.set()

    def refresh(self) -> None:
        """Re-read the deployments and the tenants' limits now (an operator suspended, resumed or re-quota'd a
        tenant), instead of at the next periodic read."""
        with self._lock:
            self._specs_read_at = float("-inf")
        self._wake.set()

    def unschedulable(self, gpu_type: str) -> str | None:
        """Why no worker can serve a deployment of `gpu_type` ("no worker can provide h100: ..."); None if one can."""
        return self.backend.offer.refusal(gpu_type)

    def status(self, deployment_id: int, gpu_type: str | None = None) -> dict:
        """Its replicas; with its `gpu_type`, also why it cannot have any (`unschedulable`, None when it can)."""
        with self._lock:
            workers = [w for w in self._workers.get(deployment_id, []) if w.alive()]
            extra = {} if gpu_type is None else {"unschedulable": self.unschedulable(gpu_type)}
            return {
                **extra,
                "replicas": len(workers),
                "ready_replicas": sum(w.cold_start_seconds() is not None for w in workers),
                "cold_start_seconds": list(self._cold_starts.get(deployment_id, ())),
            }

    def close(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._lock:
            handles = [h for hs in self._workers.values() for h in hs]
            self._workers.clear()
        # A backend whose workers outlive this process (a cluster's Deployments) may keep them serving while the
        # gateway restarts: its `close` turns the stops below into nothing.
        getattr(self.backend, "close", lambda: None)()
        for handle in handles:
            handle.stop()
        for handle in handles:
            handle.join(self.settings.stop_grace_s)
        if self.lease is not None:
            self.lease.release()  # another gateway's provisioner takes over now, not after the lease time

    # --- the loop ---
    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.tick()
            except Exception:  # a database hiccup must not end provisioning for the whole platform
                log.exception("provisioner tick failed")
            self.clock.wait(self._wake, self.settings.tick_s)
            self._wake.clear()

    def acting(self) -> bool:
        """Whether this provisioner acts now: it holds the lease, or there is none to hold."""
        return self.lease is None or self.lease.held()

    def tick(self) -> None:
        if not self.acting():
            return
        now = self.clock.monotonic()
        if now - self._specs_read_at >= self.settings.refresh_s:
            specs = {s.deployment_id: s for s in self.ready_specs()}
            limits = self.tenant_limits()
            with self._lock:
                self._specs, self._limits, self._specs_read_at = specs, limits, now
            # A backend whose workers outlive this process (a cluster's, a cloud's) also removes those of
            # deployments no longer served that no handle holds: deleted while no provisioner ran.
            getattr(self.backend, "prune", lambda keep: None)(set(specs))
        silent = [w for w in self.registry.dead(self.settings.heartbeat_timeout_s) if w.ready_at is not None]
        with self._lock:
            self._hung = {w.worker_id for w in silent}
            held = {h.worker_id for handles in self._workers.values() for h in handles}
            specs = dict(self._specs)
            gone = [d for d in self._workers if d not in specs]
        self._forget_unheld([w for w in silent if w.worker_id not in held])
        for deployment_id in gone:  # deleted (or no longer ready): its workers go
            self._scale_to(deployment_id, None, 0, now)
        self._refused &= specs.keys()  # a deleted deployment's id is not remembered
        for spec in specs.values():
            refusal = self.unschedulable(spec.gpu_type)
            if refusal is None:
                self._reconcile(spec, now)
            elif spec.deployment_id not in self._refused:
                self._refused.add(spec.deployment_id)
                log.warning("deployment %s gets no workers: %s", spec.deployment_id, refusal)

    def _forget_unheld(self, silent: list[WorkerInfo]) -> None:
        """Ready workers whose heartbeats stopped and that no handle holds are deregistered: no handle of theirs
        will be found dead and deregister them. One whose instance or process a scale-down had already let go
        can still start, register ready and then die without deregistering (killed, its machine gone); listed,
        it would stay in /workers and be offered sequences forever."""
        for info in silent:
            log.warning("worker %s of deployment %s stopped heartbeating and is held by no handle: forgotten",
                        info.worker_id, info.deployment_id)  # fmt: skip
            self.registry.deregister(info.worker_id)

    def _reconcile(self, spec: WorkerSpec, now: float) -> None:
        d = spec.deployment_id
        with self._lock:
            state = self._states.setdefault(d, _State(last_activity=now))
            workers = self._live_workers(d)
            # Workers started before the deployment's program or batching settings changed (a PATCH) are
            # replaced: each stale one finishes its batch and goes, and the scaling below starts new ones.
            stale = [h for h in workers if not spec.serves_like(h.spec)]
            if stale:
                log.info("deployment %s: replacing %d worker(s) for its new settings", d, len(stale))
                workers = self._workers[d] = [h for h in workers if spec.serves_like(h.spec)]
                self._noted.difference_update(h.worker_id for h in stale)
        for handle in stale:
            handle.stop()
        # A language model's load is its sequences: waiting for a worker, and taken by one and not yet ended.
        load_of = self.sequences if spec.is_language_model and self.sequences is not None else self.queue
        queued, in_flight = load_of.depth(d), load_of.in_flight(d)
        if queued or in_flight:
            state.last_activity = now
        policy = ScalingPolicy(
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            target_per_replica=self.settings.target_per_replica,
            idle_to_zero_s=self.settings.idle_to_zero_s,
            scale_up_cooldown_s=self.settings.scale_up_cooldown_s,
            scale_down_cooldown_s=self.settings.scale_down_cooldown_s,
        )
        load = Load(
            queued=queued,
            in_flight=in_flight,
            replicas=len(workers),
            idle_s=now - state.last_activity,
            since_scale_up_s=now - state.last_scale_up,
            since_scale_down_s=now - state.last_scale_down,
        )
        with self._lock:
            limits = self._limits.get(spec.tenant_id, UNLIMITED)
            quota = limits.max_replicas
            others = 0 if quota is None else held_by_others(self._tenant_deployments(spec.tenant_id), quota, d)
        want = limited_replicas(desired_replicas(policy, load), queued + in_flight, others, limits)
        self._scale_to(d, spec, want, now)

    def _tenant_deployments(self, tenant_id: int) -> list[TenantDeployment]:
        """The tenant's ready deployments by id, with their running workers (lock held)."""
        return [
            TenantDeployment(d, spec.min_replicas, sum(h.alive() for h in self._workers.get(d, [])))
            for d, spec in sorted(self._specs.items())
            if spec.tenant_id == tenant_id
        ]

    def _live_workers(self, deployment_id: int) -> list[WorkerHandle]:
        """The deployment's workers still running; dead ones are dropped and deregistered (lock held)."""
        alive, dead = [], []
        for handle in self._workers.get(deployment_id, []):
            self._note_cold_start(deployment_id, handle)  # dead ones too: a worker may die soon after it was ready
            if handle.worker_id in self._hung:
                log.warning("worker %s of deployment %s stopped heartbeating: replacing it", handle.worker_id,
                            deployment_id)  # fmt: skip
                handle.stop()
                dead.append(handle)
                continue
            (alive if handle.alive() else dead).append(handle)
        state = self._states.get(deployment_id)
        for handle in dead:
            log.warning("worker %s of deployment %s exited", handle.worker_id, deployment_id)
            self.registry.deregister(handle.worker_id)
            self._noted.discard(handle.worker_id)
            if state is not None and handle.cold_start_seconds() is None:
                state.failed_starts += 1
                backoff = min(MAX_RESTART_BACKOFF_S, 0.5 * 2 ** (state.failed_starts - 1))
                state.no_start_before = self.clock.monotonic() + backoff
        if state is not None and any(h.cold_start_seconds() is not None for h in alive):
            state.failed_starts = 0
        self._workers[deployment_id] = alive
        return alive

    def _note_cold_start(self, deployment_id: int, handle: WorkerHandle) -> None:
        cold_start = handle.cold_start_seconds()
        if cold_start is not None and handle.worker_id not in self._noted:
            self._noted.add(handle.worker_id)
            self._cold_starts[deployment_id].append(cold_start)

    def _scale_to(self, deployment_id: int, spec: WorkerSpec | None, want: int, now: float) -> None:
        if not self.acting():  # asked again before each change: a slow tick may outlive the lease it began with
            return
        with self._lock:
            workers = self._live_workers(deployment_id)
            state = self._states.setdefault(deployment_id, _State(last_activity=now))
            stopping: list[WorkerHandle] = []
            if want > len(workers) and spec is not None and now >= state.no_start_before:
                for _ in range(want - len(workers)):
                    workers.append(self.backend.start(spec))
                state.last_scale_up = now
                log.info("deployment %s: scaled up to %d", deployment_id, want)
            elif want < len(workers):
                # The newest go first: the oldest have warm caches and are certainly ready.
                stopping, workers[:] = workers[want:], workers[:want]
                self._noted.difference_update(h.worker_id for h in stopping)
                state.last_scale_down = now
                log.info("deployment %s: scaled down to %d", deployment_id, want)
            if spec is None and not workers:
                self._workers.pop(deployment_id, None)
                self._states.pop(deployment_id, None)
        for handle in stopping:
            handle.stop()  # graceful: it finishes its batch; the thread or process ends on its own
