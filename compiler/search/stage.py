"""The search stage of `lm.compile`: encode the graph, run the rule sets bounded, extract several candidates.

Rule sets, each next to what it concerns:
- `algebra` (rules_algebra.py): folding and identities, which only shrink the program;
- `matmul` (rules_matmul.py): expand·mul·sum-reduce as one MatMul alternative (a GEMM with its epilogue
  fused later, in the kernel IR);
- `attention` (rules_attention.py): softmax(q·kᵀ·scale + mask)·v as one Attention alternative whose scores are
  never stored; matched in Python over the encoded graph (the pattern is a dozen nodes whose views egglog
  sees only as ids) and unioned into the e-graph before the rules run.
- `elementwise` and `reduce` (rules_fusion.py) and matmul's `epilogue`: a producer its reader may compute in
  its own loop, `Inline(x)`, next to the stored buffer `x`; extraction picks per reader, and lowering carries
  the choice out on the kernel IR (compiler/fusion/fuse_chosen.py), where a kernel's body is an expression and
  fusion is substitution. They run as a second phase, after algebra and recognition have saturated.

Candidates are extractions of the one saturated e-graph under different cost functions: `search` (the
roofline e-node cost: takes every alternative the model favours), `search-no-gemm` (the same, with MatMul
never chosen). Program.py adds the unsearched graph, compiles each, ranks them by the kernel-level cost model
and, with `profile=True`, by timing them.

A graph whose layers repeat is cut into segments (search/segments.py): each distinct segment is searched once
and its candidates spliced in for every segment of its kind, so a 12-layer encoder costs a search of about
one layer.

Large graphs are searched in a child process under a wall-clock and memory limit (search/runner.py), since
egglog can neither be interrupted nor bounded in memory. The search never sees weight data: the caller binds
the weights to the candidates that come back.

Encoding and the rules do not depend on the target, only extraction does: the saturated e-graph is kept
(search/saturated.py), and a search of the same graph for another target only extracts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from egglog import ruleset

from luminal.compiler.analysis.targets import get_target
from luminal.compiler.graph.passes import eliminate_dead_code
from luminal.compiler.search import rules_algebra, rules_attention, rules_fusion, rules_matmul, saturated, segments
from luminal.compiler.search import terms as T
from luminal.compiler.search.costs import roofline_cost
from luminal.compiler.search.encode import encode, set_view_facts
from luminal.compiler.search.extract import extract_then_fuse, longest_path
from luminal.compiler.search.runner import Limits, run_bounded, run_isolated
from luminal.graph import Graph

# The phases, run one after the other, each until it saturates or a limit stops it: recognition first, so
# fusion's alternatives (an operand computed in its reader's loop) never become a GEMM's operands.
PHASES = {
    "algebra+matmul": {"algebra": rules_algebra.RULES, "matmul": rules_matmul.RULES},
    "fusion": {**rules_fusion.RULESETS, "epilogue": rules_matmul.EPILOGUE},
}
# Which constructors each phase's rules add, so the report can say what each one found.
FINDS = {"algebra": (T.View,), "matmul": (T.MatMul,), "fusion": (T.Inline,)}
ISOLATE_FROM_NODES = 400  # smaller graphs search in-process: a child costs ~1 s to start, ~0.05 s when warm


@dataclass(frozen=True)
class SearchOptions:
    node_budget: int = 200_000
    max_iterations: int = 20  # per phase
    deadline_s: float = 60.0
    isolate: bool | None = None  # None: in a child process from ISOLATE_FROM_NODES nodes
    segment: bool = True  # search each distinct segment once where the graph repeats (its layers)
    limits: Limits = field(default_factory=Limits)


@dataclass
class SearchResult:
    candidates: dict[str, Graph]
    report: dict[str, Any]


def search(graph: Graph, target: str, options: SearchOptions | None = None) -> SearchResult:
    options = options or SearchOptions()
    if options.segment:
        cut = segments.cut(graph)
        if segments.repeated(cut):
            return _search_segments(graph, cut, target, options)
    return _search_whole(graph, target, options)


def _search_segments(graph: Graph, cut: list[segments.Segment], target: str, options: SearchOptions) -> SearchResult:
    """Each distinct segment searched on its own; every candidate is the graph with each segment replaced by
    that candidate of its kind."""
    start = time.perf_counter()
    kinds: dict[tuple, segments.Segment] = {}
    for seg in cut:
        kinds.setdefault(seg.key, seg)
    whole = replace(options, segment=False)
    found = {key: _search_whole(segments.segment_graph(graph, seg), target, whole) for key, seg in kinds.items()}
    searched = time.perf_counter()
    candidates = {}
    for name in next(iter(found.values())).candidates:
        forms = {key: result.candidates[name] for key, result in found.items()}
        candidate = eliminate_dead_code(segments.assemble(graph, cut, forms))
        candidate.weight_data = {k: graph.weight_data[k] for k in candidate.weights if k in graph.weight_data}
        candidates[name] = candidate
    report = _segments_report(graph, cut, kinds, found)
    report["seconds"]["segments"] = searched - start
    report["seconds"]["assemble"] = time.perf_counter() - searched
    return SearchResult(candidates, report)


def _segments_report(graph: Graph, cut: list, kinds: dict, found: dict[tuple, SearchResult]) -> dict[str, Any]:
    """The searches of the kinds as one report: what the rule sets found counts every instance of a kind."""
    reports = [(result.report, sum(seg.key == key for seg in cut)) for key, result in found.items()]
    stops = [r["stop"] for r, _ in reports]
    first = reports[0][0]
    return {
        "graph_nodes": len(graph.nodes),
        # e-nodes of the searched segments together: before the first iteration and at the end
        "egraph_nodes": [sum(r["egraph_nodes"][0] for r, _ in reports), sum(r["egraph_nodes"][-1] for r, _ in reports)],
        "iterations": max(r["iterations"] for r, _ in reports),
        "stop": next((s for s in stops if s != "saturated"), "saturated"),
        "rulesets": {
            rs: {c: sum(r["rulesets"][rs][c] * n for r, n in reports) for c in first["rulesets"][rs]}
            for rs in first["rulesets"]
        },
        "segments": {
            "segments": len(cut),
            "searched": len(kinds),
            "searched_nodes": sum(len(s.nodes) for s in kinds.values()),
        },
        "isolated": any(r["isolated"] for r, _ in reports),
        "seconds": {k: sum(r["seconds"][k] for r, _ in reports) for k in ("encode", "rules", "extract")},
    }


def _search_whole(graph: Graph, target: str, options: SearchOptions) -> SearchResult:
    isolate = options.isolate if options.isolate is not None else len(graph.nodes) >= ISOLATE_FROM_NODES
    # The search never reads weight data, and an e-graph kept for the next search (search/saturated.py) must not
    # keep it alive: the candidates get the graph's weights back here.
    bare = _without_weight_data(graph)
    if isolate:
        result = run_isolated(_search, bare, target, options, limits=options.limits)
    else:
        result = _search(bare, target, options)
    for candidate in result.candidates.values():
        candidate.weight_data = {k: graph.weight_data[k] for k in candidate.weights if k in graph.weight_data}
    result.report["isolated"] = isolate
    return result


def _without_weight_data(graph: Graph) -> Graph:
    bare = Graph.__new__(Graph)
    bare.__dict__.update(graph.__dict__)
    bare.weight_data = {}
    return bare


def _search(graph: Graph, target: str, options: SearchOptions) -> SearchResult:
    key = saturated.key(graph, options.node_budget, options.max_iterations, options.deadline_s)
    done = saturated.find(key)
    seconds = {"encode": 0.0, "rules": 0.0}  # nothing to do where an earlier search saturated this graph
    if done is None:
        done = _saturate(graph, options)
        saturated.keep(key, done)
        seconds = done.seconds
    extracting = time.perf_counter()
    cost = roofline_cost(done.enc, get_target(target))
    no_gemm = roofline_cost(done.enc, get_target(target), exclude=("MatMul",))
    candidates = {
        "search": extract_then_fuse(done.enc, cost, longest_path, done.choices()),
        "search-no-gemm": extract_then_fuse(done.enc, no_gemm, longest_path, done.choices()),
    }
    runs = done.runs
    report = {
        "graph_nodes": len(graph.nodes),
        # e-nodes before the first iteration and after each, through the phases
        "egraph_nodes": runs[0].sizes + [n for run in runs[1:] for n in run.sizes[1:]],
        "iterations": sum(run.iterations for run in runs),
        "stop": next((run.stop for run in runs if run.stop != "saturated"), "saturated"),
        # What each rule set found: the e-nodes of the constructors only its rules make.
        "rulesets": {
            **{name: {str(c): done.sizes.get(c, 0) for c in found} for name, found in FINDS.items()},
            "attention": {str(T.Attention): done.attention},
        },
        "isolated": False,
        # Timings sit under "seconds", which artifacts leave out (they would break determinism).
        "seconds": {**seconds, "extract": time.perf_counter() - extracting},
    }
    return SearchResult(candidates, report)


def _saturate(graph: Graph, options: SearchOptions) -> saturated.Saturated:
    """`graph` encoded and every phase's rules run on it, each until it saturates or a limit stops it."""
    start = time.perf_counter()
    enc = encode(graph)
    attention = rules_attention.add_alternatives(enc)
    set_view_facts(enc)
    encoded = time.perf_counter()
    runs = []
    for phase, rulesets in PHASES.items():
        rules = ruleset(*(r for rs in rulesets.values() for r in rs), name=phase)
        budget_left = options.deadline_s - (time.perf_counter() - encoded)
        runs.append(run_bounded(enc.egraph, rules, options.node_budget, options.max_iterations, budget_left))
    searched = time.perf_counter()
    sizes = dict(enc.egraph.all_function_sizes())
    return saturated.Saturated(enc, attention, runs, sizes, {"encode": encoded - start, "rules": searched - encoded})
