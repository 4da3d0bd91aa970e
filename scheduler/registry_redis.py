"""The worker registry on Redis: a hash per worker (its record, no TTL, so a dead worker stays visible until
someone deals with it) and one sorted set of workers scored by last heartbeat, so `dead` is one range query.

Heartbeats and readiness are Lua scripts that update only a registered worker: a heartbeat racing with a
deregistration cannot bring the record back half-written.
"""

from __future__ import annotations

import redis

from luminal.scheduler.registry import UnknownWorker, WorkerInfo
from luminal.store.clock import SYSTEM_CLOCK, Clock

# KEYS: the worker's hash, the heartbeat set. ARGV: worker id, time, field to set besides last_heartbeat ('' for
# none). Returns 0 when the worker is not registered.
_TOUCH = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'last_heartbeat', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[2])
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
"""


class RedisRegistry:
    def __init__(self, url: str, namespace: str = "lm", clock: Clock = SYSTEM_CLOCK):
        # Times are this process's clock, not Redis's TIME: a test steps them, and every writer is one of ours.
        self.clock = clock
        self._redis = redis.Redis.from_url(url, decode_responses=True)
        self._namespace = namespace
        self._heartbeats = f"{namespace}:heartbeats"
        self._touch = self._redis.register_script(_TOUCH)

    def _key(self, worker_id: str) -> str:
        return f"{self._namespace}:worker:{worker_id}"

    def register(self, info: WorkerInfo) -> None:
        info.check()
        now = self.clock.time()
        record = {
            "worker_id": info.worker_id,
            "deployment_id": info.deployment_id,
            "pid": info.pid,
            "host": info.host,
            "device": info.device,
            "started_at": repr(info.started_at),
            "last_heartbeat": repr(now),
        }
        if info.ready_at is not None:
            record["ready_at"] = repr(info.ready_at)
        with self._redis.pipeline(transaction=True) as pipe:  # replaced whole: no field of an old record survives
            pipe.delete(self._key(info.worker_id))
            pipe.hset(self._key(info.worker_id), mapping=record)
            pipe.zadd(self._heartbeats, {info.worker_id: now})
            pipe.execute()

    def mark_ready(self, worker_id: str) -> None:
        self._touch_or_raise(worker_id, "ready_at")

    def heartbeat(self, worker_id: str) -> None:
        self._touch_or_raise(worker_id, "")

    def deregister(self, worker_id: str) -> None:
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(self._key(worker_id))
            pipe.zrem(self._heartbeats, worker_id)
            pipe.execute()

    def workers(self, deployment_id: int | None = None) -> list[WorkerInfo]:
        found = self._records(self._redis.zrange(self._heartbeats, 0, -1))
        found = [w for w in found if deployment_id is None or w.deployment_id == deployment_id]
        return sorted(found, key=lambda w: (w.started_at, w.worker_id))

    def dead(self, timeout_s: float) -> list[WorkerInfo]:
        cutoff = self.clock.time() - timeout_s
        silent = self._redis.zrangebyscore(self._heartbeats, "-inf", f"({cutoff!r}")  # "(": strictly older
        return sorted(self._records(silent), key=lambda w: w.last_heartbeat)

    def close(self) -> None:
        self._redis.close()

    def _touch_or_raise(self, worker_id: str, field: str) -> None:
        now = repr(self.clock.time())
        if not self._touch(keys=[self._key(worker_id), self._heartbeats], args=[worker_id, now, field]):
            raise UnknownWorker(worker_id)

    def _records(self, worker_ids: list[str]) -> list[WorkerInfo]:
        with self._redis.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                pipe.hgetall(self._key(worker_id))
            records = pipe.execute()
        # A worker deregistered between the two reads has an empty record: it is simply gone.
        return [_info(record) for record in records if record]


def _info(record: dict[str, str]) -> WorkerInfo:
    return WorkerInfo(
        worker_id=record["worker_id"],
        deployment_id=int(record["deployment_id"]),
        pid=int(record["pid"]),
        host=record["host"],
        device=record.get("device", "cpu"),  # records of workers from before devices were recorded ran on the CPU
        started_at=float(record["started_at"]),
        ready_at=float(record["ready_at"]) if "ready_at" in record else None,
        last_heartbeat=float(record["last_heartbeat"]),
    )
