"""CPU time per request of each serving process, embedded against Redis mode: the gap a loaded machine turns
into latency.

On a machine whose CPUs are shared (this one: 2 vCPUs, load average in the hundreds), a request's latency is
mostly the CPU its processes need on its path, stretched by everyone else's. Wall-clock legs then say little;
CPU seconds do not depend on the load. This starts `luminal serve` embedded and on Redis (as bench/serve.py
does), deploys the small model (batching off) on each, sends N sequential requests to each in turn, and reads
each process's user+system CPU from /proc before and after: the gateway, the worker process (Redis mode; in the
embedded mode the worker is a thread of the gateway) and the Redis server (`INFO cpu`; other users of that
Redis count too, so it is a ceiling). The plain FastAPI server of bench/serve.py, calling the same program, is
measured the same way: the HTTP cost every mode pays, so the platform's own work is the rest. Wall p50 is
printed beside, as measured. So are each process's voluntary context switches per request (its threads' waits
that ended: hand-offs between threads, blocking reads, and an OpenMP team's futex sleeps, which are ~100 per
run once libgomp throttles its spinning), which tell a hand-off from work.

`python bench/serving_cpu.py [--requests N] [--queue-url redis://host:port/db]`
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

import luminal as lm
from luminal.cli.client import PlatformClient

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ holds scripts, not a package
from serve import HERE, body, delete_namespace, deploy, free_port, small_model, start_platform, wait_for  # noqa: E402

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (its threads included), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def sleeps(pid: int) -> int:
    """Voluntary context switches of all the process's threads so far, from /proc/PID/task/*/status."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        total += sum(int(line.split()[1]) for line in status.splitlines() if line.startswith("voluntary_ctxt"))
    return total


def redis_cpu(url: str) -> float:
    import redis

    client = redis.Redis.from_url(url)
    info = client.info("cpu")
    client.close()
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def worker_pid(url: str, key: str) -> int:
    """The deployment's worker process, once it has registered (the first requests start it)."""
    auth = {"Authorization": f"Bearer {key}"}
    for _ in range(600):
        httpx.post(f"{url}/v2/models/small/infer", json=body(np.ones((1, 32), np.float32)), headers=auth, timeout=120)
        workers = httpx.get(f"{url}/v1/deployments/1/workers", headers=auth).json()["workers"]
        if workers:
            return workers[0]["pid"]
        time.sleep(0.1)
    sys.exit("no worker process registered")


def measure(target: str, key: str, pids: dict[str, int], queue_url: str | None, requests: int) -> dict[str, float]:
    """Per request to `target`: ms of CPU of each named process (and Redis), and the wall p50."""
    payload = body(np.random.default_rng(1).standard_normal((1, 32)).astype(np.float32))
    client = httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120)
    for _ in range(50):  # warm
        client.post(target, json=payload).raise_for_status()
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    slept = {name: sleeps(pid) for name, pid in pids.items()}
    redis_before = redis_cpu(queue_url) if queue_url else 0.0
    walls = []
    for _ in range(requests):
        start = time.perf_counter()
        client.post(target, json=payload).raise_for_status()
        walls.append((time.perf_counter() - start) * 1e3)
    out = {name: (cpu_seconds(pid) - before[name]) * 1e3 / requests for name, pid in pids.items()}
    out |= {f"{name} sleeps": (sleeps(pid) - slept[name]) / requests for name, pid in pids.items()}
    if queue_url:
        out["redis server"] = (redis_cpu(queue_url) - redis_before) * 1e3 / requests
    out["wall p50"] = statistics.median(walls)
    client.close()
    return out


def print_row(mode: str, name: str, value: float) -> None:
    unit = "wall ms" if name == "wall p50" else "switches" if name.endswith("sleeps") else "CPU ms"
    print(f"    {mode:<10}{name:<24}{value:>12.3f} {unit}")


def main() -> None:
    parser = argparse.ArgumentParser(description="CPU per request of each serving process")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--queue-url", default=os.environ.get("LUMINAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()
    key = "lm_" + secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small = tmp / "small.lgraph"
        lm.save(small_model(), small)
        platforms = {"embedded": start_platform(tmp, key, None), "Redis": start_platform(tmp, key, args.queue_url)}
        plain_port = free_port()
        plain = subprocess.Popen([sys.executable, str(HERE / "plain_server.py"), str(small), str(plain_port)])
        plain_url = f"http://127.0.0.1:{plain_port}"
        try:
            wait_for(f"{plain_url}/live", plain)
            for process, url, _ in platforms.values():
                wait_for(f"{url}/v2/health/live", process)
                client = PlatformClient(url, key, timeout=600)
                deploy(client, small, "small", max_batch_size=1, delay_ms=0)
                client.close()
            print(f"load average {os.getloadavg()[0]:.2f}; {args.requests} sequential small-model requests per mode")
            print(f"    {'mode':<10}{'process':<24}{'per request':>12}")
            plain_figures = measure(f"{plain_url}/infer", key, {"server": plain.pid}, None, args.requests)
            for name, value in plain_figures.items():
                print_row("plain", name, value)
            for mode, (process, url, _) in platforms.items():
                pids = {"gateway": process.pid}
                if mode == "Redis":
                    pids["worker process"] = worker_pid(url, key)
                target = f"{url}/v2/models/small/infer"
                figures = measure(target, key, pids, args.queue_url if mode == "Redis" else None, args.requests)
                for name, value in figures.items():
                    print_row(mode, name, value)
            print(f"load average at the end {os.getloadavg()[0]:.2f}")
        finally:
            plain.terminate()
            plain.wait(timeout=60)
            for process, _, _ in platforms.values():
                process.terminate()
                process.wait(timeout=60)
            for _, _, namespace in platforms.values():
                if namespace:
                    delete_namespace(args.queue_url, namespace)


if __name__ == "__main__":
    main()
