"""Bounded search: a ruleset run step by step under a node budget, in a child process under hard limits.

egglog has no node limit and no timeout, and one Rust step cannot be interrupted (one step can grow the
e-graph tenfold). So there are two layers:
- `run_bounded` runs one iteration at a time and measures the e-graph between iterations. It stops at an
  iteration cap, or before a step that would cross the node budget if it grew the e-graph as much as the
  last step did (growth accelerates: a 12-term chain under associativity went 1.4K -> 16K -> 170K e-nodes).
  A budget is still a soft limit: an accelerating step can land past it.
- `run_isolated` runs a whole search function in a child process with a wall-clock limit (the child is
  killed) and an address-space limit (RLIMIT_AS, so a runaway allocation fails inside the child instead
  of exhausting the machine). The child is a fresh interpreter (search/child.py): forking a process that
  already holds egglog's Rust threads is unsafe, and multiprocessing's spawn and forkserver re-run the
  caller's main script, which a user's top-level `lm.compile(...)` would turn into a fork bomb. Children
  are kept warm from call to call (search/child_pool.py).
"""

from __future__ import annotations

import pickle
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from egglog import EGraph, Ruleset

from luminal.compiler.search import child_pool
from luminal.compiler.search.encode import egraph_size


class SearchError(RuntimeError):
    """The search function raised in the child, or the child died; the message carries the cause."""


class SearchTimeout(SearchError):
    """The child ran past its wall-clock limit and was killed."""


class SearchOutOfMemory(SearchError):
    """The child hit its memory limit (a MemoryError in Python, or an aborted allocation in Rust)."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 120.0  # then the child is killed and what it found is lost: size searches well within it
    memory_bytes: int = 4 << 30  # address space, not resident memory: egglog alone maps ~250 MB at import


@dataclass
class RunReport:
    iterations: int = 0
    stop: str = ""  # "saturated" | "node budget" | "iteration cap" | "deadline"
    sizes: list[int] = field(default_factory=list)  # e-nodes before the first step and after each one
    seconds: float = 0.0


def run_bounded(
    egraph: EGraph,
    ruleset: Ruleset,
    node_budget: int = 200_000,  # ~2.7 KB per e-node with analyses: about 0.5 GB
    max_iterations: int = 50,
    deadline_s: float | None = None,  # checked between steps, like the budget
    size: Callable[[EGraph], int] = egraph_size,
) -> RunReport:
    """Run `ruleset` one iteration at a time until it saturates or a limit is reached."""
    start = time.monotonic()
    report = RunReport(sizes=[size(egraph)])
    while not report.stop:
        if report.iterations >= max_iterations:
            report.stop = "iteration cap"
        elif _projected(report.sizes) > node_budget:
            report.stop = "node budget"
        elif deadline_s is not None and time.monotonic() - start > deadline_s:
            report.stop = "deadline"
        else:
            changed = egraph.run(1, ruleset=ruleset).updated
            report.iterations += 1
            report.sizes.append(size(egraph))
            report.stop = "" if changed else "saturated"
    report.seconds = time.monotonic() - start
    return report


def _projected(sizes: list[int]) -> float:
    """The size after one more step that grows the e-graph by the same factor as the last one."""
    growth = sizes[-1] / max(sizes[-2], 1) if len(sizes) > 1 else 1.0
    return sizes[-1] * max(growth, 1.0)


def run_isolated(fn: Callable, *args: Any, limits: Limits | None = None) -> Any:
    """`fn(*args)` in a child process under `limits`; its result (which must pickle) or a SearchError.

    `fn` must be importable by name (a module-level function): the child is a fresh interpreter
    (search/child.py) that gets the parent's sys.path, kept warm for the next call (search/child_pool.py). The
    wall clock includes starting it (~1 s) where no warm one is idle.
    """
    limits = limits or Limits()
    request = pickle.dumps((list(sys.path), pickle.dumps((fn, args, limits.memory_bytes))))
    while True:
        child = child_pool.take(limits.memory_bytes)
        try:
            reply = child.call(request, limits.wall_s)
            break
        except TimeoutError:
            raise SearchTimeout(f"{_name(fn)} ran past its limit of {limits.wall_s:g} s and was killed") from None
        except child_pool.ChildDied as died:
            if not died.before_request:  # else a warm child that was leaving: the request goes to another
                raise _death(fn, died.returncode, limits, died.stderr) from None
    kind, result, address_space = pickle.loads(reply)
    if kind == "oom":
        child.kill()  # a MemoryError can leave any object half built
        raise SearchOutOfMemory(f"{_name(fn)} ran out of its {limits.memory_bytes >> 20} MiB:\n{result}")
    child_pool.give_back(child, address_space)
    if kind == "ok":
        return result
    raise SearchError(f"{_name(fn)} failed in the child process:\n{result}")


def _death(fn: Callable, exitcode: int | None, limits: Limits, stderr: str) -> SearchError:
    # Rust reports a failed allocation by aborting the process, which is what RLIMIT_AS causes.
    if exitcode in (-signal.SIGABRT, -signal.SIGKILL, -signal.SIGSEGV) or "memory allocation" in stderr:
        return SearchOutOfMemory(
            f"{_name(fn)} died (exit {exitcode}) under a memory limit of {limits.memory_bytes >> 20} MiB:\n{stderr}"
        )
    return SearchError(f"{_name(fn)} died without a result (exit code {exitcode}):\n{stderr}")


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", repr(fn))
