"""The worker registry on both backends (in-memory and Redis): registration, readiness, heartbeats, dead workers.
Each registry reads a stepped clock, so cold starts and heartbeat ages are exact, and nothing sleeps."""

from __future__ import annotations

import pytest

from luminal.scheduler.registry import MemoryRegistry, UnknownWorker, WorkerInfo, open_registry


def worker(
    registry, worker_id: str, deployment_id: int = 1, started_ago: float = 0.0, device: str = "cpu"
) -> WorkerInfo:
    started_at = registry.clock.time() - started_ago
    return WorkerInfo(worker_id, deployment_id, pid=1000, host="gpu-node-1", device=device, started_at=started_at)


def test_register_then_ready_records_the_cold_start(registry):
    registry.register(worker(registry, "w1", started_ago=2.0, device="h100"))
    (info,) = registry.workers()
    assert (info.worker_id, info.deployment_id, info.pid, info.host) == ("w1", 1, 1000, "gpu-node-1")
    assert info.device == "h100"  # the GPU type it runs on, kept by both backends
    assert not info.ready and info.cold_start_seconds is None
    assert info.last_heartbeat == registry.clock.time()  # registering counts as a heartbeat
    registry.clock.advance(0.5)  # loading the program
    registry.mark_ready("w1")
    (info,) = registry.workers()
    assert info.ready and info.cold_start_seconds == pytest.approx(2.5)
    assert info.last_heartbeat == info.ready_at == registry.clock.time()


def test_workers_filters_by_deployment_oldest_first(registry):
    registry.register(worker(registry, "b", deployment_id=1, started_ago=1))
    registry.register(worker(registry, "a", deployment_id=1, started_ago=5))
    registry.register(worker(registry, "c", deployment_id=2))
    assert [w.worker_id for w in registry.workers(1)] == ["a", "b"]
    assert [w.worker_id for w in registry.workers(2)] == ["c"]
    assert registry.workers(3) == []
    assert {w.worker_id for w in registry.workers()} == {"a", "b", "c"}


def test_dead_lists_workers_whose_heartbeats_stopped(registry):
    registry.register(worker(registry, "silent"))
    registry.register(worker(registry, "alive"))
    registry.clock.advance(0.4)
    registry.heartbeat("alive")
    assert [w.worker_id for w in registry.dead(timeout_s=0.3)] == ["silent"]
    assert registry.dead(timeout_s=0.4) == []  # exactly as old as the timeout: not yet dead
    assert registry.dead(timeout_s=5) == []
    registry.clock.advance(0.2)
    assert [w.worker_id for w in registry.dead(timeout_s=0.3)] == ["silent"]  # the heartbeat restarted "alive"
    registry.deregister("silent")
    assert registry.dead(timeout_s=0.3) == [] and [w.worker_id for w in registry.workers()] == ["alive"]


def test_deregistered_or_unknown_workers_cannot_heartbeat(registry):
    registry.register(worker(registry, "w1"))
    registry.deregister("w1")
    registry.deregister("w1")  # twice is fine
    with pytest.raises(UnknownWorker, match="'w1' is not registered"):
        registry.heartbeat("w1")
    with pytest.raises(UnknownWorker):
        registry.mark_ready("nobody")
    assert registry.workers() == []


def test_registering_again_replaces_the_record(registry):
    registry.register(worker(registry, "w1", deployment_id=1))
    registry.mark_ready("w1")
    registry.register(worker(registry, "w1", deployment_id=2))  # the same id restarted for another deployment
    (info,) = registry.workers()
    assert info.deployment_id == 2 and not info.ready


@pytest.mark.parametrize(
    "bad, message",
    [
        (WorkerInfo("", 1, 1, "h"), "worker_id"),
        (WorkerInfo("w", "1", 1, "h"), "deployment_id"),  # type: ignore[arg-type]
        (WorkerInfo("w", 1, -5, "h"), "pid"),
        (WorkerInfo("w", 1, 1, None), "host"),  # type: ignore[arg-type]
        (WorkerInfo("w", 1, 1, "h", device=""), "device"),
    ],
)
def test_bad_records_are_refused(registry, bad, message):
    with pytest.raises(ValueError, match=message):
        registry.register(bad)
    assert registry.workers() == []


def test_open_registry_picks_the_backend_by_url():
    assert isinstance(open_registry(""), MemoryRegistry)
    assert isinstance(open_registry("memory://"), MemoryRegistry)
    with pytest.raises(ValueError, match="not supported"):
        open_registry("http://localhost")
