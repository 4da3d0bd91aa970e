"""Who holds each taken sequence on Redis, so that a dead worker's sequences stop counting as the deployment's load.

A deployment's taken set is its in-flight load, which the autoscaler reads. A worker removes a sequence from it when
the sequence ends, and the relaying gateway when it finds the worker dead; a worker and its gateway both gone (or a
client gone at the moment its worker died) would leave the entry there for good. So each taken sequence's worker is
kept in a hash beside the set, and counting the load first drops the entries of workers whose load reports went
stale (a live worker reports every heartbeat; a killed one's last report stays until the reports' hash expires).
"""

from __future__ import annotations

import time

import redis

from luminal.scheduler.sequences.request import WorkerLoad

STALE_REPORT_S = 15.0  # a worker silent this long is dead or hung (as the gateway's relay judges it)


def dead_holdings(owners: dict[bytes, bytes], loads: dict[str, WorkerLoad], now: float | None = None) -> list[bytes]:
    """The request ids in `owners` (request id -> worker id) whose worker's last load report is stale. A worker
    with no report is not judged (a live one reports before it takes anything; one that stopped did so after
    ending all it held), and neither is its sequence."""
    now = time.time() if now is None else now
    stale = {worker for worker, load in loads.items() if now - load.reported_at >= STALE_REPORT_S}
    return [request_id for request_id, worker in owners.items() if worker.decode() in stale]


def reap(client: redis.Redis, taken_key: str, owners_key: str, loads: dict[str, WorkerLoad]) -> int:
    """Drop the taken entries of dead workers; the number dropped."""
    owners = client.hgetall(owners_key)
    dead = dead_holdings(owners, loads)
    if not dead:
        return 0
    with client.pipeline() as pipe:
        pipe.srem(taken_key, *dead)
        pipe.hdel(owners_key, *dead)
        return int(pipe.execute()[0])
