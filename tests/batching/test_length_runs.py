"""Cutting a padded group into runs of similar length: the cut is the cheapest, equal lengths stay together in
queue order, and a model run through the cut runs answers every request as it would be answered alone."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from luminal.batching.assemble import padded_runs
from luminal.batching.length_runs import MAX_RUN_UNITS, length_runs, run_cost
from tests.batching.test_sequence import graph, layout_of, req


def runs_of(lengths, overhead, rows=None):
    """length_runs over plain (name, length, rows) tuples: the lengths of each run."""
    items = [(f"r{k}", n, 1 if rows is None else rows[k]) for k, n in enumerate(lengths)]
    runs = length_runs(items, lambda r: {"s": r[1]}, lambda r: r[2], overhead)
    return [[r[1] for r in run] for run in runs], runs


def brute_force_cost(lengths, rows, overhead):
    """The cheapest cost over every cut of the sorted lengths into consecutive runs."""
    pairs = sorted(zip(lengths, rows))
    best = math.inf
    for cuts in itertools.product([False, True], repeat=len(pairs) - 1):
        cost, start = 0.0, 0
        for k, cut in enumerate([*cuts, True]):
            if cut:
                run = pairs[start : k + 1]
                cost += run_cost(sum(r for _, r in run), {"s": max(n for n, _ in run)}, overhead)
                start = k + 1
        best = min(best, cost)
    return best


def test_a_far_longer_request_runs_apart_and_equal_lengths_stay_together():
    lengths, _ = runs_of([4, 60, 4, 4, 4], overhead=16)
    assert lengths == [[4, 4, 4, 4], [60]]  # 16 + 16 and 16 + 60 tokens, against 16 + 5 * 60 together


def test_a_costly_execution_keeps_one_run_and_a_free_one_cuts_every_length():
    lengths, _ = runs_of([9, 3, 5, 3], overhead=1000)
    assert lengths == [[3, 3, 5, 9]]
    lengths, _ = runs_of([9, 3, 5, 3], overhead=0)
    assert lengths == [[3, 3], [5], [9]]


def test_equal_lengths_keep_their_queue_order():
    _, runs = runs_of([7, 7, 2, 7], overhead=16)
    assert [[r[0] for r in run] for run in runs] == [["r2", "r0", "r1", "r3"]]


def test_rows_weigh_in_the_cost():
    # One request of 3 rows at length 10 makes padding the 2s to 10 cost 3 rows' worth less than cutting.
    assert runs_of([2, 2, 10], overhead=8, rows=[1, 1, 3])[0] == [[2, 2], [10]]
    assert runs_of([2, 2, 10], overhead=30, rows=[1, 1, 3])[0] == [[2, 2, 10]]


@pytest.mark.parametrize("seed", range(20))
def test_the_cut_is_the_cheapest_of_all(seed):
    rng = np.random.default_rng(seed)
    count = int(rng.integers(2, 9))
    lengths = [int(n) for n in rng.integers(1, 64, count)]
    rows = [int(r) for r in rng.integers(1, 4, count)]
    overhead = float(rng.choice([0, 4, 16, 64]))
    got, runs = runs_of(lengths, overhead, rows)
    assert sorted(n for run in got for n in run) == sorted(lengths)  # every request once
    cost = sum(run_cost(sum(r[2] for r in run), {"s": max(r[1] for r in run)}, overhead) for run in runs)
    assert cost == pytest.approx(brute_force_cost(lengths, rows, overhead))


def test_a_bad_overhead_is_refused_by_name():
    with pytest.raises(ValueError, match="overhead_tokens must be a finite number >= 0"):
        runs_of([1, 2], overhead=-1)


def test_padded_runs_cut_within_length_buckets_and_leave_unpadded_layouts_alone():
    layout = layout_of(graph(), length_buckets=(16,))
    short, other_short, long, beyond = req(2), req(2), req(16), req(30)
    runs = padded_runs([long, short, beyond, other_short], layout, overhead_tokens=4)
    assert [[r.id for r in run] for run in runs] == [[short.id, other_short.id], [long.id], [beyond.id]]
    unpadded = layout_of(graph(padded=False))
    a, b = req(3), req(3)
    assert [[r.id for r in run] for run in padded_runs([a, b], unpadded)] == [[a.id, b.id]]


def test_a_run_spans_at_most_max_run_units_distinct_lengths_and_loses_no_request():
    lengths = list(range(1, 1025))[::-1]  # 1024 requests of all different lengths: the search stays bounded
    got, runs = runs_of(lengths, overhead=10**9)  # an execution so dear that one run would be cheapest
    assert sorted(n for run in got for n in run) == sorted(lengths)
    assert all(len(set(run)) <= MAX_RUN_UNITS for run in got) and len(got) == -(-1024 // MAX_RUN_UNITS)
