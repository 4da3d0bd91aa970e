"""What a second thread running a compiled CPU program costs every run: libgomp gives each thread that starts a
parallel region its own team of threads, and once the teams' threads outnumber the CPUs it stops spinning
between regions and sleeps on a futex at each one.

The all-MiniLM-L6-v2 program (as bench/sentence_load.py builds it) runs from the main thread alone, then while
another thread that ran it is still alive (a second worker thread, a caller running a request in a worker's
place, a profiling compile thread), then after that thread ended. Printed: p50 run time and voluntary context
switches per run. On a 2-CPU machine (issue 20), otherwise idle (load 1.4): 3-4.6 ms and 0 switches alone, 6.3 ms
and 115 switches while the second thread lives. With another process busy on one of the two CPUs (load 3) it
went the other way: 11.5 ms alone, 6.9 ms (183 switches) throttled, since a spinning team whose other thread
lost its CPU spins for nothing. Compare only runs made under the same load. Then, in a fresh process, the same
three cases with every run handed to one ComputeThread, as the gateway runs its programs: one team, whoever calls.

`python bench/openmp_teams.py [--runs N]`
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import luminal as lm
from luminal.scheduler.compute_thread import ComputeThread
from luminal.scheduler.programs import LoadedProgram

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ holds scripts, not a package
import sentence_load  # noqa: E402


def timed_runs(program, feeds: list, runs: int) -> tuple[float, float]:
    """(p50 ms, voluntary context switches per run) of `runs` runs on this thread."""
    times = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    for i in range(runs):
        start = time.perf_counter()
        program.run(feeds[i % len(feeds)])
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), (resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description="a second OpenMP team's cost to every run")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--compute-thread", action="store_true", help="every run through one ComputeThread")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "minilm.lgraph"
        sentence_load.save_graph(path)
        program = lm.compile(lm.load(path), target="cpu")
    if args.compute_thread:  # as the gateway runs them: made ready and run on one thread, whoever calls
        program = LoadedProgram(program, ComputeThread())
    feeds = sentence_load.tokenised()
    for feed in feeds:  # warm: the arenas of each length are made
        program.run(feed)
    if not args.compute_thread:
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.runs} runs each")
    ran, release = threading.Event(), threading.Event()

    def other_thread() -> None:
        for feed in feeds:
            program.run(feed)
        ran.set()
        release.wait()  # alive, its team (if it made one) with it

    rows = [("main thread alone", timed_runs(program, feeds, args.runs))]
    other = threading.Thread(target=other_thread)
    other.start()
    ran.wait()
    rows.append(("while a second thread that ran it lives", timed_runs(program, feeds, args.runs)))
    release.set()
    other.join()
    rows.append(("after that thread ended", timed_runs(program, feeds, args.runs)))
    if args.compute_thread:
        print("  every run through one ComputeThread (scheduler/compute_thread.py):")
    for name, (p50, switches) in rows:
        print(f"    {name:<42}p50 {p50:6.2f} ms   {switches:6.1f} voluntary switches per run")
    if not args.compute_thread:  # in a fresh process: this one's threads keep their teams
        command = [sys.executable, __file__, "--runs", str(args.runs), "--compute-thread"]
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
