"""The provisioner's reconcile loop with a fake worker backend and a queue whose load the test sets: replicas
follow the queue between min and max, a request wakes a deployment at zero, idle deployments go back to zero,
dead workers are replaced, deleted deployments lose their workers, cold starts are recorded. The provisioner and
its registry read a stepped clock: idle times, backoffs and heartbeat ages are exact, and nothing sleeps."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from luminal.provisioner.backends import _ThreadHandle
from luminal.provisioner.device_offer import DeviceOffer
from luminal.provisioner.provisioner import Provisioner, ProvisionerSettings
from luminal.runtime.cuda.devices import Gpu
from luminal.scheduler.registry import WorkerInfo, open_registry
from luminal.scheduler.worker_spec import WorkerSpec
from luminal.store.clock import ManualClock

SPEC = WorkerSpec(
    deployment_id=1, tenant_id=1, model="m", version=1, program_key="k", gpu_type="cpu", max_batch_size=8,
    max_queue_delay_ms=1, min_replicas=0, max_replicas=3, signature={}, symbols={},
)  # fmt: skip


class FakeHandle:
    def __init__(self, spec: WorkerSpec, n: int, started_at: float):
        self.worker_id, self.deployment_id, self.spec = f"w{n}", spec.deployment_id, spec
        self.started_at = started_at
        self.running, self.stopped = True, False

    def alive(self) -> bool:
        return self.running

    def cold_start_seconds(self):
        return 0.25

    def stop(self) -> None:
        self.stopped, self.running = True, False

    def join(self, timeout: float) -> bool:
        return True


class FakeBackend:
    def __init__(self, clock: ManualClock):
        self.clock, self.offer = clock, DeviceOffer()  # the CPU only; a test may give it GPUs
        self.started: list[FakeHandle] = []

    def start(self, spec: WorkerSpec) -> FakeHandle:
        assert self.offer.refusal(spec.gpu_type) is None, "the provisioner started a worker the backend lacks"
        self.started.append(FakeHandle(spec, len(self.started), self.clock.monotonic()))
        return self.started[-1]

    def running(self) -> list[FakeHandle]:
        return [h for h in self.started if h.running]


class FakeQueue:
    def __init__(self):
        self.queued = self.executing = 0

    def depth(self, deployment_id: int) -> int:
        return self.queued

    def in_flight(self, deployment_id: int) -> int:
        return self.executing


@pytest.fixture
def world():
    specs, clock = [SPEC], ManualClock()
    queue, backend = FakeQueue(), FakeBackend(clock)
    settings = ProvisionerSettings(target_per_replica=4, idle_to_zero_s=0.25, scale_up_cooldown_s=0,
                                   scale_down_cooldown_s=0, refresh_s=0)  # fmt: skip
    registry = open_registry(None, clock=clock)
    provisioner = Provisioner(lambda: list(specs), queue, registry, backend, settings, clock)
    return provisioner, specs, queue, backend


def test_replicas_follow_the_queue_within_the_bounds(world):
    provisioner, _, queue, backend = world
    provisioner.tick()
    assert backend.running() == []  # min 0, nothing queued
    queue.queued = 5
    provisioner.tick()
    assert len(backend.running()) == 2  # ceil(5 / 4)
    queue.queued = 100
    provisioner.tick()
    assert len(backend.running()) == 3  # max_replicas
    assert provisioner.status(1)["replicas"] == 3
    provisioner.tick()  # cold starts are noted as the loop sees the workers ready
    assert provisioner.status(1)["cold_start_seconds"] == [0.25] * 3


def test_idle_deployments_scale_down_to_zero_and_a_request_wakes_them(world):
    provisioner, _, queue, backend = world
    queue.queued = 4
    provisioner.tick()
    assert len(backend.running()) == 1
    queue.queued = 0
    provisioner.tick()
    assert len(backend.running()) == 1  # active a moment ago: one stays warm
    provisioner.clock.advance(0.125)
    provisioner.tick()
    assert len(backend.running()) == 1  # idle for half of idle_to_zero_s
    provisioner.clock.advance(0.125)
    provisioner.tick()
    assert backend.running() == [] and backend.started[0].stopped
    provisioner.notify(1)
    queue.queued = 1
    provisioner.tick()
    assert len(backend.running()) == 1


def test_a_gpu_type_the_backend_lacks_gets_no_worker_and_says_why(world, caplog):
    provisioner, specs, queue, backend = world
    specs[0] = dataclasses.replace(SPEC, gpu_type="h100", min_replicas=1)
    queue.queued = 50
    provisioner.notify(1)
    provisioner.tick()
    provisioner.tick()
    assert backend.started == []  # never a worker on the CPU in its place
    logged = [r.getMessage() for r in caplog.records if "gets no workers" in r.getMessage()]
    assert logged == ["deployment 1 gets no workers: " + provisioner.unschedulable("h100")]  # once, not per tick
    reason = "no worker can provide h100: this platform's local provisioner found no GPU"
    assert provisioner.unschedulable("h100") == reason
    assert provisioner.status(1, "h100") == {"unschedulable": reason, "replicas": 0, "ready_replicas": 0,
                                             "cold_start_seconds": []}  # fmt: skip
    assert provisioner.unschedulable("cpu") is None


def test_a_gpu_type_the_backend_found_gets_workers(world):
    provisioner, specs, queue, backend = world
    backend.offer = DeviceOffer((Gpu(0, "NVIDIA H100 80GB HBM3", "h100"),))
    specs[0] = dataclasses.replace(SPEC, gpu_type="h100", min_replicas=1)
    provisioner.tick()
    assert [h.spec.gpu_type for h in backend.running()] == ["h100"]
    assert provisioner.status(1, "h100")["unschedulable"] is None


def test_min_replicas_stay_warm_and_dead_workers_are_replaced(world):
    provisioner, specs, _, backend = world
    specs[0] = dataclasses.replace(SPEC, min_replicas=2)
    provisioner.tick()
    assert len(backend.running()) == 2
    backend.started[0].running = False  # the worker died
    provisioner.tick()
    assert len(backend.running()) == 2 and len(backend.started) == 3


def test_a_deleted_deployment_loses_its_workers(world):
    provisioner, specs, _, backend = world
    specs[0] = dataclasses.replace(SPEC, min_replicas=1)
    provisioner.tick()
    assert len(backend.running()) == 1
    specs.clear()
    provisioner.tick()
    assert backend.running() == [] and provisioner.status(1)["replicas"] == 0


def test_workers_that_die_before_ready_are_restarted_with_backoff(world):
    provisioner, specs, _, backend = world
    specs[0] = dataclasses.replace(SPEC, min_replicas=1)
    provisioner.tick()
    for attempt in range(2):
        failing = backend.started[-1]
        failing.cold_start_seconds = lambda: None  # it never became ready
        failing.running = False
        provisioner.tick()
        assert len(backend.started) == attempt + 1, "restarted without waiting"
        provisioner.clock.advance(0.5 * 2**attempt - 0.125)  # the backoff doubles: 0.5 s, then 1 s
        provisioner.tick()
        assert len(backend.started) == attempt + 1, "restarted before the backoff ended"
        provisioner.clock.advance(0.125)
        provisioner.tick()
        assert len(backend.started) == attempt + 2


def test_a_ready_worker_that_stops_heartbeating_is_replaced(world):
    provisioner, specs, _, backend = world
    specs[0] = dataclasses.replace(SPEC, min_replicas=1)
    provisioner.tick()
    (hung,) = backend.running()
    registry = provisioner.registry
    registry.register(WorkerInfo(hung.worker_id, 1, pid=1, host="h", started_at=provisioner.clock.time()))
    registry.mark_ready(hung.worker_id)
    provisioner.clock.advance(provisioner.settings.heartbeat_timeout_s)
    provisioner.tick()
    assert backend.running() == [hung]  # its last heartbeat is exactly as old as the timeout: left alone
    provisioner.clock.advance(1.0)  # silent past the timeout
    provisioner.tick()
    assert hung.stopped and len(backend.running()) == 1 and backend.running()[0] is not hung
    assert [w.worker_id for w in registry.workers(1)] == []  # deregistered: it steps down if it ever wakes


def test_a_silent_ready_worker_no_handle_holds_is_forgotten(world):
    """A worker whose instance a scale-down had let go can still register ready, then die without deregistering
    (killed, its machine gone): no handle of the provisioner's will ever be found dead and deregister it."""
    provisioner, specs, _, backend = world
    specs[0] = dataclasses.replace(SPEC, min_replicas=1)
    provisioner.tick()
    (held,) = backend.running()
    registry, now = provisioner.registry, provisioner.clock.time()
    for worker_id in (held.worker_id, "let-go", "loading"):
        registry.register(WorkerInfo(worker_id, 1, pid=1, host="h", started_at=now))
    registry.mark_ready("let-go")  # "loading" never says it is ready: a cold start may outlast the timeout
    provisioner.clock.advance(provisioner.settings.heartbeat_timeout_s / 2)
    registry.heartbeat(held.worker_id)  # the held worker lives on (not ready yet either)
    provisioner.clock.advance(provisioner.settings.heartbeat_timeout_s / 2)
    provisioner.tick()
    assert {w.worker_id for w in registry.workers(1)} == {held.worker_id, "let-go", "loading"}  # not past it yet
    provisioner.clock.advance(1.0)
    provisioner.tick()
    assert {w.worker_id for w in registry.workers(1)} == {held.worker_id, "loading"}
    assert backend.running() == [held] and not held.stopped


def test_workers_are_replaced_when_the_batching_settings_change_but_not_the_replica_bounds(world):
    provisioner, specs, _, backend = world
    specs[0] = dataclasses.replace(SPEC, min_replicas=1)
    provisioner.tick()
    (first,) = backend.running()
    specs[0] = dataclasses.replace(specs[0], max_replicas=2)  # bounds only: the worker serves as before
    provisioner.tick()
    assert backend.running() == [first]
    specs[0] = dataclasses.replace(specs[0], max_batch_size=64)  # a PATCH of the batching settings
    provisioner.tick()
    (second,) = backend.running()
    assert first.stopped and second.spec.max_batch_size == 64


class LoadingWorker:
    """What a thread handle needs of a Worker: it is ready when the test says its program has loaded."""

    def __init__(self):
        self.worker_id, self.ready = "w-thread", threading.Event()

    def run(self, stop: threading.Event) -> None:
        stop.wait()


def test_a_thread_worker_cold_start_is_read_on_the_provisioner_clock():
    clock, worker = ManualClock(), LoadingWorker()
    handle = _ThreadHandle(worker, SPEC, clock)
    try:
        clock.advance(1.25)  # loading its program
        worker.ready.set()
        deadline = time.monotonic() + 10  # only for the handle's watcher thread to run: no duration is asserted
        while handle.cold_start_seconds() is None:
            assert time.monotonic() < deadline, "the handle never saw the worker ready"
            time.sleep(0.01)
        assert handle.cold_start_seconds() == 1.25
    finally:
        handle.stop()
        assert handle.join(10)
