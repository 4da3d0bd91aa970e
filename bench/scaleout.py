"""Requests per second through one gateway and through two, side by side: the same platform (PostgreSQL, Redis,
an S3 server, a Celery compile worker, the same worker processes serving the same tiny model), the same client
concurrency. Each repeat sends `--requests` requests through gateway A alone, then spread over A and B (the order
alternates between repeats); the medians and their ratio are printed, with the machine's load average.

The anchor is the one-gateway run of the same repeat. On a 2-core machine two gateways cannot show scale: the
gateways, the workers, Redis, PostgreSQL and this client all share the two cores, so the ratio says what a second
gateway costs here, not what it gains across machines.

`python bench/scaleout.py [--requests 2000] [--repeats 3] [--concurrency 16] [--workers 2]`
(PostgreSQL at $LUMINAL_TEST_POSTGRES_URL, default 127.0.0.1:5432; Redis at $LUMINAL_TEST_REDIS_URL.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test helpers start the processes

from luminal.graph_file import graph_to_bytes  # noqa: E402
from tests.gateway.conftest import ADMIN_URL, tiny_graph  # noqa: E402
from tests.scaleout.cluster import Shared, close_all, deploy, start_platform  # noqa: E402
from tests.scaleout.load import Load  # noqa: E402
from tests.scheduler.queue_fixtures import REDIS_URL  # noqa: E402
from tests.store.s3_server import BUCKET, aws_environment, start_s3_server  # noqa: E402

KEY = "lm_bench-scaleout-key-0123456789abcdef"


def requests_per_second(gateways: dict[str, str], requests: int, concurrency: int) -> tuple[float, dict]:
    load = Load(gateways, KEY, "tiny", concurrency, max_requests=requests)
    began = time.perf_counter()
    load.start().finish()
    seconds = time.perf_counter() - began
    statuses = load.statuses()
    wrong = sum(o.status == 200 and not o.right for o in load.outcomes.values())
    if statuses != {200: requests} or wrong:
        raise SystemExit(f"not every request was answered right: {dict(statuses)}, {wrong} wrong")
    return requests / seconds, {name: load.answered(name) for name in gateways}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the deployment")
    args = parser.parse_args()

    import psycopg
    import redis

    admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)
    database = f"luminal_bench_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{database}"')
    namespace = f"lmbench-{uuid.uuid4().hex[:12]}"
    processes, s3 = [], None
    with tempfile.TemporaryDirectory(prefix="scaleout-") as tmp:
        root = Path(tmp)
        try:
            s3_log = open(root / "rclone.log", "wb")  # noqa: SIM115 - closed below
            (root / "s3").mkdir()
            s3, endpoint = start_s3_server(root / "s3", s3_log)
            base = ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
            shared = Shared(f"{base}/{database}", REDIS_URL, namespace, f"s3://{BUCKET}/bench", KEY,
                            {**aws_environment(endpoint), "LUMINAL_MAX_QUEUE_DEPTH": "100000"})  # fmt: skip
            a, b = start_platform(shared, root, processes)
            deploy(a, "tiny", graph_to_bytes(tiny_graph()), args.workers)
            one, two = {"gw-a": a.url}, {"gw-a": a.url, "gw-b": b.url}
            requests_per_second(two, min(args.requests, 500), args.concurrency)  # warm both gateways' caches
            rows = []
            for repeat in range(args.repeats):
                order = [("one", one), ("two", two)]
                runs = dict((name, requests_per_second(g, args.requests, args.concurrency)) for name, g in
                            (order if repeat % 2 == 0 else order[::-1]))  # fmt: skip
                rows.append(runs)
                print(f"repeat {repeat + 1}: one gateway {runs['one'][0]:7.1f} req/s   two gateways "
                      f"{runs['two'][0]:7.1f} req/s (answered by {runs['two'][1]})", flush=True)  # fmt: skip
            single = statistics.median(r["one"][0] for r in rows)
            double = statistics.median(r["two"][0] for r in rows)
            print(f"\nmedian of {args.repeats}, {args.requests} requests each, concurrency {args.concurrency}, "
                  f"{args.workers} worker processes, tiny model (4 -> 3 softmax), CPU")  # fmt: skip
            print(f"  one gateway   {single:8.1f} req/s   (anchor)")
            print(f"  two gateways  {double:8.1f} req/s   {double / single:.2f}x")
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; on 2 cores two gateways "
                  "cannot show scale (every process shares the same two cores)")  # fmt: skip
        finally:
            close_all(processes)
            if s3 is not None:
                s3.terminate()
                s3.wait(timeout=30)
            client = redis.Redis.from_url(REDIS_URL)
            for key in client.scan_iter(match=f"{namespace}:*", count=500):
                client.delete(key)
            client.close()
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.close()


if __name__ == "__main__":
    main()
