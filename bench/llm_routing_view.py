"""The cost of one routing decision on the Redis transport: the load reports read per request (the anchor) against
the cached view (load_view.py), with W workers' full reports (MAX_REPORTED_PREFIXES prefixes each).

Two runs of the view: quiet (no report during the loop: one read) and busy (every worker reporting each
llm_worker.REPORT_S, as workers caching new prefixes every round do: the view reads again after each report).

`python bench/llm_routing_view.py [--workers 8] [--decisions 1000]` prints microseconds per decision, the view's
reads, and the ratios.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid

from luminal.scheduler.llm_worker import REPORT_S
from luminal.scheduler.sequences.redis_sequences import RedisSequences
from luminal.scheduler.sequences.request import WorkerLoad
from luminal.scheduler.sequences.routing import MAX_REPORTED_PREFIXES, choose_worker, short_digests

REDIS_URL = os.environ.get("LUMINAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
DEPLOYMENT, BLOCK = 1, 16


def full_load(worker: int) -> WorkerLoad:
    """A big pool's report: MAX_REPORTED_PREFIXES prefixes (each worker's its own)."""
    prompt = [(worker * 7919 + k) % 32000 for k in range(MAX_REPORTED_PREFIXES * BLOCK + 1)]
    prefixes = tuple(short_digests(prompt, BLOCK))[:MAX_REPORTED_PREFIXES]
    return WorkerLoad(worker % 3, 0, 500, free_rows=8, block_size=BLOCK, prefixes=prefixes)


def per_decision_us(route, decisions: int, at_least_s: float = 0.0) -> float:
    """Mean microseconds of `route` over `decisions` calls or more, until `at_least_s` passed."""
    prompt, done = list(range(200)), 0
    start = time.perf_counter()
    while done < decisions or time.perf_counter() - start < at_least_s:
        route(prompt)
        done += 1
    return (time.perf_counter() - start) / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--decisions", type=int, default=1000)
    args = parser.parse_args()
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    workers, gateway = RedisSequences(REDIS_URL, namespace), RedisSequences(REDIS_URL, namespace)
    loads = {f"w-{k}": full_load(k) for k in range(args.workers)}
    try:
        for worker, load in loads.items():
            workers.report(DEPLOYMENT, worker, load)
        gateway.recent_loads(DEPLOYMENT)  # the listener started, as a gateway's first request does
        time.sleep(0.2)

        def per_request(prompt):  # the anchor: every report read and decoded per decision
            return choose_worker(prompt, gateway.loads(DEPLOYMENT), gateway.backlog(DEPLOYMENT))

        def cached(prompt):
            return choose_worker(prompt, gateway.recent_loads(DEPLOYMENT), gateway.backlog(DEPLOYMENT))

        anchor = per_decision_us(per_request, args.decisions)
        reads = gateway._view.reads
        quiet = per_decision_us(cached, args.decisions)
        quiet_reads = gateway._view.reads - reads

        stop = threading.Event()

        def reporting():  # every worker reports each REPORT_S
            while not stop.wait(REPORT_S):
                for worker, load in loads.items():
                    workers.report(DEPLOYMENT, worker, load)

        reporter = threading.Thread(target=reporting, daemon=True)
        reporter.start()
        reads, started = gateway._view.reads, time.perf_counter()
        busy = per_decision_us(cached, args.decisions, at_least_s=20 * REPORT_S)  # through 20 rounds of reports
        busy_reads, busy_s = gateway._view.reads - reads, time.perf_counter() - started
        stop.set()
        reporter.join()
    finally:
        gateway.close()
        workers.close()
    print(f"{args.workers} workers x {MAX_REPORTED_PREFIXES} prefixes, {args.decisions} decisions, "
          f"load {open('/proc/loadavg').read().split()[0]}")  # fmt: skip
    print(f"  reports read per decision   {anchor:9.1f} us/decision")
    print(f"  view, quiet                 {quiet:9.1f} us/decision  reads={quiet_reads}  ratio {anchor / quiet:.1f}x")
    print(f"  view, reports every {REPORT_S}s  {busy:9.1f} us/decision  reads={busy_reads} in {busy_s:.2f} s  "
          f"ratio {anchor / busy:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
