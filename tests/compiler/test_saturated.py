"""Saturated e-graphs kept for the next search of the same graph (compiler/search/saturated.py): one graph compiled
for several targets is encoded and rewritten once, and each target's candidates are what a search from scratch
extracts."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.search import saturated, stage
from luminal.compiler.search.stage import SearchOptions, search
from luminal.graph_file import graph_fingerprint


def block(seed: int = 0, d: int = 16) -> lm.Graph:
    """A norm, a projection with a bias and a GELU: MatMul, fusion and algebra all find something."""
    g = lm.Graph()
    rng = np.random.default_rng(seed)
    x = g.input("x", (lm.sym("batch", max=8), d))
    w, b = g.weight("w", (d, d)), g.weight("b", (d,))
    g.bind({"w": rng.standard_normal((d, d)).astype(np.float32), "b": rng.standard_normal(d).astype(np.float32)})
    normed = (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True) + 1e-5).sqrt()
    (normed @ w + b).gelu().output("y")
    return g


@pytest.fixture(autouse=True)
def nothing_kept():
    saturated.forget()
    yield
    saturated.forget()


@pytest.fixture
def encodings(monkeypatch) -> list[lm.Graph]:
    seen: list[lm.Graph] = []
    real = stage.encode

    def counting(graph):
        seen.append(graph)
        return real(graph)

    monkeypatch.setattr(stage, "encode", counting)
    return seen


def fingerprints(graph: lm.Graph, target: str) -> dict[str, str]:
    found = search(graph, target, SearchOptions(isolate=False))
    return {name: graph_fingerprint(candidate) for name, candidate in found.candidates.items()}


@pytest.mark.parametrize("isolate", [False, True])
def test_a_graph_searched_for_three_targets_is_saturated_once(encodings, isolate):
    g = block(d=12 if isolate else 16)  # a warm child keeps what it saturated: a graph no other test searches
    reports = [search(g, t, SearchOptions(isolate=isolate)).report for t in ("cpu", "h100", "m2")]
    if not isolate:
        assert len(encodings) == 1
    assert reports[0]["seconds"]["rules"] > 0
    assert [r["seconds"]["encode"] for r in reports[1:]] == [0.0, 0.0]  # in the warm child too
    assert reports[1]["egraph_nodes"] == reports[0]["egraph_nodes"]


def test_each_target_extracts_what_a_search_from_scratch_does():
    g = block()
    reused = {t: fingerprints(g, t) for t in ("cpu", "h100", "m2")}
    for target in ("h100", "m2"):
        saturated.forget()
        assert fingerprints(g, target) == reused[target]


def test_candidates_carry_their_own_graphs_weights(encodings):
    first, second = block(seed=1), block(seed=2)
    a = search(first, "cpu", SearchOptions(isolate=False)).candidates["search"]
    b = search(second, "cpu", SearchOptions(isolate=False)).candidates["search"]
    assert len(encodings) == 1  # the same structure: saturated once
    assert all(np.array_equal(a.weight_data[k], first.weight_data[k]) for k in ("w", "b"))
    assert all(np.array_equal(b.weight_data[k], second.weight_data[k]) for k in ("w", "b"))
    assert not any(saturated_graph.weight_data for saturated_graph in encodings)  # kept e-graphs hold no weights


def test_other_limits_or_another_graph_are_searched_again(encodings):
    search(block(), "cpu", SearchOptions(isolate=False))
    search(block(), "cpu", SearchOptions(isolate=False, node_budget=50_000))
    search(block(d=8), "cpu", SearchOptions(isolate=False))
    assert len(encodings) == 3


def test_only_the_last_few_and_small_e_graphs_are_kept(encodings, monkeypatch):
    for d in range(4, 4 + saturated.KEEP + 1):
        search(block(d=d), "cpu", SearchOptions(isolate=False))
    search(block(d=4), "cpu", SearchOptions(isolate=False))  # the oldest was dropped
    assert len(encodings) == saturated.KEEP + 2
    monkeypatch.setattr(saturated, "KEEP_NODES", 10)
    saturated.forget()
    search(block(), "cpu", SearchOptions(isolate=False))
    search(block(), "cpu", SearchOptions(isolate=False))
    assert len(encodings) == saturated.KEEP + 4
