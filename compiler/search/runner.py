"""Bounded search: a ruleset run step by step under a node budget, in a child process under hard limits.

egglog has no node limit and no timeout, and one Rust step cannot be interrupted (one step can grow the
e-graph tenfold). So there are two layers:
- `run_bounded` runs one iteration at a time and measures the e-graph between iterations. It stops at an
  iteration cap, or before a step that would cross the node budget if it grew the e-graph as much as the
  last step did (growth accelerates: a 12-term chain under associativity went 1.4K -> 16K -> 170K e-nodes).
  A budget is still a soft limit: an accelerating step can land past it.
- `run_isolated` runs a whole search function in a child process with a wall-clock limit (the child is
  killed) and an address-space limit (RLIMIT_AS, so a runaway allocation fails inside the child instead
  of exhausting the machine). The child comes from the 'forkserver' context: forking a process that
  already holds egglog's Rust threads is unsafe, and a fresh interpreter per search is slower.
"""

from __future__ import annotations

import multiprocessing
import resource
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from egglog import EGraph, Ruleset

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


def _child(conn: Any, fn: Callable, args: tuple, memory_bytes: int) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        outcome = ("ok", fn(*args))
    except MemoryError:
        outcome = ("oom", traceback.format_exc())
    except BaseException:  # everything is reported to the parent, which raises
        outcome = ("error", traceback.format_exc())
    try:
        conn.send(outcome)
    except MemoryError:
        conn.send(("oom", "the result could not be sent within the memory limit"))
    except Exception:  # a result that does not pickle
        conn.send(("error", traceback.format_exc()))
    conn.close()


def run_isolated(fn: Callable, *args: Any, limits: Limits | None = None) -> Any:
    """`fn(*args)` in a child process under `limits`; its result (which must pickle) or a SearchError.

    `fn` must be importable by name (a module-level function), as the child is a fresh process. The wall
    clock starts before the child does, so it includes starting it and importing `fn`'s module (~1 s).
    """
    limits = limits or Limits()
    ctx = multiprocessing.get_context("forkserver")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(sender, fn, args, limits.memory_bytes), daemon=True)
    child.start()
    sender.close()  # the child holds the only writer: EOF on `receiver` means it is gone
    try:
        if not receiver.poll(limits.wall_s):
            raise SearchTimeout(f"{_name(fn)} ran past its limit of {limits.wall_s:g} s and was killed")
        try:
            kind, payload = receiver.recv()
        except EOFError:
            child.join(5)
            raise _death(fn, child.exitcode, limits) from None
    finally:
        if child.is_alive():
            child.kill()
        child.join(5)
        receiver.close()
    if kind == "ok":
        return payload
    if kind == "oom":
        raise SearchOutOfMemory(f"{_name(fn)} ran out of its {limits.memory_bytes >> 20} MiB:\n{payload}")
    raise SearchError(f"{_name(fn)} failed in the child process:\n{payload}")


def _death(fn: Callable, exitcode: int | None, limits: Limits) -> SearchError:
    # Rust reports a failed allocation by aborting the process, which is what RLIMIT_AS causes.
    if exitcode in (-signal.SIGABRT, -signal.SIGKILL, -signal.SIGSEGV):
        return SearchOutOfMemory(
            f"{_name(fn)} died with signal {-exitcode} under a memory limit of {limits.memory_bytes >> 20} MiB"
        )
    return SearchError(f"{_name(fn)} died without a result (exit code {exitcode})")


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", repr(fn))
