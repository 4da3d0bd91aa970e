"""The version choice of gateway/traffic_routing.py: every window of 100 picks gives each version exactly its
percent, spread out rather than in runs, and a model's round keeps its place until its ready weights change."""

from __future__ import annotations

from collections import Counter

from luminal.gateway.traffic_routing import SmoothRoundRobin, VersionChooser


def test_each_hundred_picks_match_the_split_exactly():
    rounds = SmoothRoundRobin(((1, 90), (2, 10)))
    picks = [rounds.pick() for _ in range(2000)]
    for start in range(0, 2000, 100):
        assert Counter(picks[start : start + 100]) == {1: 90, 2: 10}
    twos = [i for i, v in enumerate(picks) if v == 2]
    assert {b - a for a, b in zip(twos, twos[1:], strict=False)} == {10}  # one in ten, evenly


def test_three_versions_and_uneven_weights():
    rounds = SmoothRoundRobin(((1, 50), (3, 33), (7, 17)))
    assert Counter(rounds.pick() for _ in range(300)) == {1: 150, 3: 99, 7: 51}
    assert Counter(SmoothRoundRobin(((4, 100),)).pick() for _ in range(5)) == {4: 5}


def test_a_round_keeps_its_place_until_the_weights_change():
    chooser = VersionChooser()
    split = ((1, 90), (2, 10))
    picks = [chooser.choose((1, "m"), split) for _ in range(10)]
    assert Counter(picks) == {1: 9, 2: 1}
    # Another model's round is its own; this model's continues where it was.
    assert chooser.choose((1, "other"), ((5, 100),)) == 5
    assert Counter(chooser.choose((1, "m"), split) for _ in range(90)) == {1: 81, 2: 9}
    # Version 2 dropped out (its deployment was deleted): all of the traffic goes to version 1.
    assert Counter(chooser.choose((1, "m"), ((1, 90),)) for _ in range(20)) == {1: 20}
