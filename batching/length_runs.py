"""A group of requests of different lengths split into runs of similar length, so padding costs little.

A padded batch runs every request at the group's longest length: eight sentences of 4 to 24 tokens run as 192
tokens for 96 real ones. Sorted by length and cut into runs, each run pads only to its own longest, but every
run is one more execution, and an execution has a cost no padding saves: a GEMM over few rows streams its
weights once for few tokens, so a short run computes each token slower than a long one. The cut is the one
that minimises the estimated cost of all runs, an execution costing `overhead_tokens` plus the tokens it
computes (rows times the product of its padded lengths), found by dynamic programming over the sorted
distinct lengths.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

R = TypeVar("R")

# What one more execution costs, in tokens, for all-MiniLM-L6-v2 compiled for the cpu on this repository's 2-core
# AVX2 test machine: one thread computes a pass in about 3.9 ms plus 0.33 ms per token (`bench/padding_runs.py
# --cpu-time` fits it; the 3.9 ms is mostly its 44 MB of float32 weights streamed once per pass), so a cut is
# worth it when it saves more than 12 padded tokens. Two threads measured a little less (6 to 8 tokens).
DEFAULT_OVERHEAD_TOKENS = 12
MAX_RUN_UNITS = 128  # distinct lengths one run may span, for the search's time


def run_cost(rows: int, lengths: Mapping[str, int], overhead_tokens: float) -> float:
    """The estimated cost of one execution of `rows` rows padded to `lengths`, in tokens."""
    return overhead_tokens + rows * math.prod(lengths.values())


def length_runs(
    requests: Sequence[R],
    lengths_of: Callable[[R], Mapping[str, int]],
    rows_of: Callable[[R], int],
    overhead_tokens: float = DEFAULT_OVERHEAD_TOKENS,
) -> list[list[R]]:
    """`requests` (one batchable group) as runs of consecutive lengths, shortest first, minimising the summed
    `run_cost`. Requests of equal length keep their queue order. One run when padding costs less than a cut."""
    if overhead_tokens < 0 or not math.isfinite(overhead_tokens):
        raise ValueError(f"overhead_tokens must be a finite number >= 0, got {overhead_tokens!r}")
    if len(requests) <= 1:
        return [list(requests)]
    # Sort by the padded token count each would need alone per row (the product over padded symbols), then
    # treat requests of equal lengths as one unit: a cut between them saves no padding, so it is never cheaper.
    order = sorted(requests, key=lambda r: math.prod(lengths_of(r).values()))
    units: list[list] = []  # [lengths, rows, requests], by length
    for request in order:
        lengths = dict(lengths_of(request))
        if units and units[-1][0] == lengths:
            units[-1][1] += rows_of(request)
            units[-1][2].append(request)
        else:
            units.append([lengths, rows_of(request), [request]])
    n = len(units)
    best = [0.0] + [math.inf] * n  # best[j]: the cheapest cut of units[:j]
    cut_at = [0] * (n + 1)  # cut_at[j]: where the last run of that cut starts
    for j in range(1, n + 1):
        longest: dict[str, int] = {}
        run_rows = 0
        # The last run is units[i:j], at most MAX_RUN_UNITS distinct lengths long: this bounds the search's
        # time (a group of 1024 requests of all different lengths); a run that would span more is cut.
        for i in range(j - 1, max(j - MAX_RUN_UNITS, 0) - 1, -1):
            run_rows += units[i][1]
            for symbol, extent in units[i][0].items():
                longest[symbol] = max(longest.get(symbol, 0), extent)
            cost = best[i] + run_cost(run_rows, longest, overhead_tokens)
            if cost <= best[j]:  # on a tie the longer last run: fewer executions
                best[j], cut_at[j] = cost, i
    runs, j = [], n
    while j > 0:
        runs.append([request for unit in units[cut_at[j] : j] for request in unit[2]])
        j = cut_at[j]
    return runs[::-1]
