"""Where the time of one Redis-mode request goes: each leg timed, with real Redis and a worker process.

The gateway side (this process) submits one small-model request at a time to a `RedisStreamsQueue` and waits for
its result as `SchedulerBackend` does; the worker side is the real `Worker` loop in its own process, on the same
queue URL, with the real SQL ledger (SQLite in a temporary folder, as `luminal serve` uses by default, or
`--database-url`). Thin proxies around the queue, the codec, the program and the ledger record monotonic
timestamps (`time.perf_counter`, one clock for every process of a Linux machine), so each leg is measured where
it happens:

    submit        gateway: encode + admission script (XADD)
    to worker     submit returned -> the worker's take returned it (wake-up from the blocking read + take script)
    decode        worker: decoding the request (inside take)
    former        take returned -> the program starts (batch forming, grouping, assembling)
    run           the compiled program
    bill          the usage record written to the ledger before the answer (`--bill sql`, as worker processes did
                  before issue 20's drainer; absent by default: the record rides in the completion's script)
    complete      encode + store the result and acknowledge (and, by default, the usage record)
    to gateway    complete returned -> the gateway's wait returned (its wake-up and read, decode included);
                  negative when the gateway had the result before the worker had the script's reply
    gw decode     the gateway decoding the result
    total         submit called -> result in hand

`--mode embedded` runs the same legs in one process as the embedded platform does: the in-memory queue, a worker
thread, its usage through a `BufferedLedger`; the gateway side is this process's event loop in both modes.

`python bench/redis_legs.py [--requests N] [--mode redis|embedded] [--bill redis|sql] [--database-url URL]
[--max-batch N --delay-ms MS]` prints the median (and p90) of each leg.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

import luminal as lm

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ holds scripts, not a package
from serve import small_model  # noqa: E402

REDIS_URL = os.environ.get("LUMINAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
LEGS = ("submit", "to worker", "decode", "former", "run", "bill", "complete", "to gateway", "gw decode", "total")


def _stamp(events: list, name: str, request_id: str, start: float, end: float) -> None:
    events.append((name, request_id, start, end))


def _timed(events: list, name: str, function, request_id_of):
    """`function`, each call stamped as leg `name` of the request `request_id_of(value, *args)` names."""

    def timed(*args):
        start = time.perf_counter()
        value = function(*args)
        _stamp(events, name, request_id_of(value, *args), start, time.perf_counter())
        return value

    return timed


class _TimedQueue:
    """The worker's queue, its take and completions timed."""

    def __init__(self, queue, events: list):
        self._queue, self._events = queue, events

    def take(self, deployment_id, consumer, max_items, wait_s):
        start = time.perf_counter()
        taken = self._queue.take(deployment_id, consumer, max_items, wait_s)
        for delivery in taken:
            _stamp(self._events, "take", delivery.request.id, start, time.perf_counter())
        return taken

    def complete(self, delivery, result):
        start = time.perf_counter()
        self._queue.complete(delivery, result)
        _stamp(self._events, "complete", result.request_id, start, time.perf_counter())

    def complete_all(self, completions, usage=None):
        start = time.perf_counter()
        if usage is None:
            self._queue.complete_all(completions)
        else:
            self._queue.complete_all(completions, usage=usage)
        for _, result in completions:
            _stamp(self._events, "complete", result.request_id, start, time.perf_counter())

    def __getattr__(self, name):
        return getattr(self._queue, name)


def _worker(queue, registry, ledger, program_path: str, spec_fields: dict, events: list):
    """The real Worker on `queue`, its program's runs and its ledger's writes timed."""
    from luminal.scheduler.programs import ProgramCache
    from luminal.scheduler.worker import Worker
    from luminal.scheduler.worker_spec import WorkerSpec

    if ledger is not None:
        ledger.record = _timed(events, "bill", ledger.record, lambda _, usage: usage.request_ids[0])
    programs = ProgramCache(lambda key: Path(program_path), max_loaded=1)
    loaded = programs.get("small")
    loaded.run = _timed(events, "run", loaded.run, lambda *_: "")  # matched to its request by time
    return Worker(WorkerSpec(**spec_fields), _TimedQueue(queue, events), programs, ledger, registry)


def _worker_main(url: str, namespace: str, database_url: str, program_path: str, spec_fields: dict, out: str,
                 bill: str) -> None:  # fmt: skip
    """The worker process: the real Worker loop, its legs written to `out` (JSON lines) when it stops. `bill`:
    'redis' (the usage record stored with the answers, as `worker_process` does) or 'sql' (written first)."""
    import signal

    from luminal.scheduler.ledger import SqlUsageLedger
    from luminal.scheduler.queues import codec, open_queue
    from luminal.scheduler.registry import open_registry
    from luminal.store.database import Database

    events: list = []
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    codec.decode_request = _timed(events, "decode", codec.decode_request, lambda request, _: request.id)
    db = Database(database_url)
    ledger = SqlUsageLedger(db, {"cpu": 0.0001}) if bill == "sql" else None
    queue = open_queue(url, namespace)
    worker = _worker(queue, open_registry(url, namespace), ledger, program_path, spec_fields, events)
    try:
        worker.run(stop)
    finally:
        queue.close()
        db.dispose()
        with open(out, "w") as f:
            for event in events:
                f.write(json.dumps(event) + "\n")


def _database(database_url: str):
    """A migrated database holding one tenant and one deployment of a model `small`, for the usage records."""
    from luminal.store import deployments as deployment_store
    from luminal.store import models as model_store
    from luminal.store.database import Database, migrate
    from luminal.store.models import UploadedGraph
    from luminal.store.tenants import create_tenant

    db = Database(database_url)
    migrate(db.engine)
    signature = {"inputs": [{"name": "x", "shape": ["batch", 32], "dtype": "float32"}], "outputs": []}
    spec = deployment_store.DeploymentSpec("small", None, "cpu", "cpu", 1, 0, 0, 1)
    with db.session() as s:
        tenant, _ = create_tenant(s, f"legs-{uuid.uuid4().hex[:8]}")
        model_store.add_version(s, tenant, "small", UploadedGraph("ab" * 32, 10, "k", signature, {}))
        deployment_id = deployment_store.create_deployment(s, tenant, spec).id
    db.dispose()
    return tenant.id, deployment_id


async def _gateway(queue, deployment_id: int, tenant_id: int, requests: int, events: list) -> None:
    from luminal.scheduler.queues import codec
    from luminal.scheduler.work import InferenceRequest

    codec.decode_result = _timed(events, "gw decode", codec.decode_result, lambda result, _: result.request_id)
    x = np.random.default_rng(0).standard_normal((1, 32)).astype(np.float32)
    for _ in range(requests):
        request = InferenceRequest(deployment_id, tenant_id, {"x": x}, deadline=time.time() + 30)
        start = time.perf_counter()
        await queue.enqueue(request, 1000)  # as the gateway's SchedulerBackend admits it
        submitted = time.perf_counter()
        result = await queue.wait_result(request.id, 30)
        done = time.perf_counter()
        assert result.ok, result.error
        _stamp(events, "submit", request.id, start, submitted)
        _stamp(events, "wait", request.id, submitted, done)


def measure(
    requests: int, database_url: str | None, max_batch: int = 1, delay_ms: int = 0, mode: str = "redis",
    bill: str = "redis",
) -> dict[str, list[float]]:  # fmt: skip
    from luminal.graph_json import signature, symbol_table

    with tempfile.TemporaryDirectory() as tmp:
        database_url = database_url or f"sqlite:///{tmp}/luminal.db"
        tenant_id, deployment_id = _database(database_url)
        graph = small_model()
        program_path = f"{tmp}/small.lprog"
        from luminal.compiler.artifact import save_program

        save_program(lm.compile(graph, target="cpu"), program_path)
        spec = dict(deployment_id=deployment_id, tenant_id=tenant_id, model="small", version=1, program_key="small",
                    gpu_type="cpu", max_batch_size=max_batch, max_queue_delay_ms=delay_ms, min_replicas=1,
                    max_replicas=1, signature=signature(graph), symbols=symbol_table(graph))  # fmt: skip
        run = _embedded if mode == "embedded" else _distributed
        events = run(requests, database_url, program_path, spec, tenant_id, deployment_id, tmp, bill)
    return _legs(events)


def _distributed(requests, database_url, program_path, spec, tenant_id, deployment_id, tmp, bill) -> list:
    """A worker process on Redis; this process is the gateway."""
    from luminal.scheduler.queues import open_queue

    namespace = f"legs-{uuid.uuid4().hex[:8]}"
    out = f"{tmp}/worker.jsonl"
    context = multiprocessing.get_context("spawn")
    args = (REDIS_URL, namespace, database_url, program_path, spec, out, bill)
    worker = context.Process(target=_worker_main, args=args)
    worker.start()
    queue = open_queue(REDIS_URL, namespace)
    events: list = []
    try:
        asyncio.run(_gateway(queue, deployment_id, tenant_id, 20, []))  # warm: the worker loads meanwhile
        asyncio.run(_gateway(queue, deployment_id, tenant_id, requests, events))
    finally:
        worker.terminate()
        worker.join(timeout=30)
        queue.close()
        _clean(namespace)
    with open(out) as f:
        return events + [tuple(json.loads(line)) for line in f]


def _embedded(requests, database_url, program_path, spec, tenant_id, deployment_id, tmp, bill) -> list:
    """The embedded platform's shape: the in-memory queue and a worker thread in this process, its usage through
    a BufferedLedger (journaled) as the gateway's thread workers write it."""
    from luminal.scheduler.ledger import SqlUsageLedger
    from luminal.scheduler.ledger_writer import BufferedLedger
    from luminal.scheduler.queues.memory import MemoryQueue
    from luminal.scheduler.registry import open_registry
    from luminal.scheduler.usage_journal import UsageJournal
    from luminal.store.database import Database

    db = Database(database_url)
    ledger = BufferedLedger(SqlUsageLedger(db, {"cpu": 0.0001}), UsageJournal(Path(tmp) / "journal"))
    queue, events, stop = MemoryQueue(), [], threading.Event()
    worker = _worker(queue, open_registry(None), ledger, program_path, spec, events)
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        asyncio.run(_gateway(queue, deployment_id, tenant_id, 20, []))
        del events[:]  # the warm-up's
        asyncio.run(_gateway(queue, deployment_id, tenant_id, requests, events))
    finally:
        stop.set()
        thread.join(timeout=30)
        ledger.close()
        queue.close()
        db.dispose()
    return events


def _clean(namespace: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"{namespace}:*", count=500):
        client.delete(key)
    client.close()


def _legs(events: list) -> dict[str, list[float]]:
    """Per request, the legs in ms; the worker's unnamed run and bill events are matched to the take before."""
    by_request: dict[str, dict[str, tuple[float, float]]] = {}
    runs = sorted((e for e in events if e[0] == "run"), key=lambda e: e[2])
    for name, request_id, start, end in events:
        if name != "run":
            by_request.setdefault(request_id, {})[name] = (start, end)
    legs: dict[str, list[float]] = {leg: [] for leg in LEGS}
    for timings in by_request.values():
        if not {"submit", "wait", "take", "complete"} <= timings.keys():
            continue  # a warm-up request
        taken = timings["take"][1]
        run = next(r for r in runs if r[2] >= taken)
        ms = {
            "submit": timings["submit"][1] - timings["submit"][0],
            "to worker": taken - timings["submit"][1],
            "decode": _span(timings, "decode"),
            "former": run[2] - taken,
            "run": run[3] - run[2],
            "bill": _span(timings, "bill"),
            "complete": timings["complete"][1] - timings["complete"][0],
            "to gateway": timings["wait"][1] - timings["complete"][1],
            "gw decode": _span(timings, "gw decode"),
            "total": timings["wait"][1] - timings["submit"][0],
        }
        for leg, seconds in ms.items():
            legs[leg].append(seconds * 1e3)
    return legs


def _span(timings: dict[str, tuple[float, float]], leg: str) -> float:
    """A leg's seconds; 0 where this mode has no such step (no codec in memory, no ledger write on Redis)."""
    start, end = timings.get(leg, (0.0, 0.0))
    return end - start


def main() -> None:
    parser = argparse.ArgumentParser(description="the legs of one Redis-mode request")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--database-url", default=None, help="the ledger's database (default: SQLite in a tmp dir)")
    parser.add_argument("--max-batch", type=int, default=1, help="the deployment's max batch size")
    parser.add_argument("--delay-ms", type=int, default=0, help="the deployment's max queue delay")
    parser.add_argument("--mode", choices=("redis", "embedded"), default="redis")
    parser.add_argument(
        "--bill", choices=("redis", "sql"), default="redis", help="Redis mode: usage with the answers, or SQL first"
    )
    args = parser.parse_args()
    legs = _legs_or_exit(args.requests, args.database_url, args.max_batch, args.delay_ms, args.mode, args.bill)
    how = "Redis and a worker process" if args.mode == "redis" else "the in-memory queue and a worker thread"
    billing = f", usage billed via {args.bill}" if args.mode == "redis" else ""
    print(f"one small-model request through {how}, {len(legs['total'])} sequential requests, "
          f"max batch {args.max_batch}, delay {args.delay_ms} ms{billing}")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.2f}; ms per leg")
    print(f"    {'leg':<14}{'p50':>9}{'p90':>9}")
    for leg in LEGS:
        values = sorted(legs[leg])
        p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
        print(f"    {leg:<14}{statistics.median(values):>9.3f}{p90:>9.3f}")


def _legs_or_exit(requests: int, database_url: str | None, max_batch: int, delay_ms: int, mode: str,
                  bill: str) -> dict[str, list[float]]:  # fmt: skip
    legs = measure(requests, database_url, max_batch, delay_ms, mode, bill)
    if not legs["total"]:
        sys.exit("no request was timed end to end")
    return legs


if __name__ == "__main__":
    main()
