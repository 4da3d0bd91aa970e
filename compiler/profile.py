"""Profiling candidates: each distinct candidate program is built and timed on the local CPU runtime.

Inputs are random arrays of each input's dtype at concrete dims (`dims`, else every symbol at the smaller of
its declared maximum and PROFILE_DIM). The result is the median of a few runs after a warm-up, per
candidate; candidates are timed one after another, in turn, so slow drift on a shared machine hits all alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping

import numpy as np

from luminal import dtypes as dt
from luminal.compiler import ir
from luminal.graph import Graph

PROFILE_DIM = 128
ROUNDS = 5


def profile_inputs(graph: Graph, dims: Mapping[str, int] | None) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    env = {name: min(int(s.hi), PROFILE_DIM) for name, s in graph.symbols.items()}
    env.update(dims or {})
    rng = np.random.default_rng(0)
    weights = set(graph.weights.values())
    arrays = {}
    for label, nid in graph.inputs.items():
        if nid in weights:
            continue
        node = graph.nodes[nid]
        shape = tuple(int(d.evaluate(env)) if hasattr(d, "evaluate") else int(d) for d in node.shape)
        if node.dtype.is_float:
            arrays[label] = rng.standard_normal(shape).astype(node.dtype.np)
        elif node.dtype == dt.bool_:
            arrays[label] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            arrays[label] = np.zeros(shape, node.dtype.np)  # indexes: 0 is in range of any gather
    return arrays, {k: v for k, v in env.items() if k in graph.symbols}


def time_candidates(
    programs: Mapping[str, tuple[Graph, ir.KernelProgram, str]], dims: Mapping[str, int] | None = None
) -> dict[str, float]:
    """Median seconds of one run of each candidate program (graph, kernels, C source)."""
    from luminal.runtime.cpu import CpuExecutable

    built, arrays, env = {}, None, None
    for name, (graph, kernels, source) in programs.items():
        built[name] = CpuExecutable(graph, kernels, source, graph.weight_data)
        if arrays is None:
            arrays, env = profile_inputs(graph, dims)
    times: dict[str, list[float]] = {name: [] for name in built}
    for exe in built.values():
        exe.run(arrays, env)  # warm-up: arena allocation, first touch, thread start
    for _ in range(ROUNDS):
        for name, exe in built.items():
            start = time.perf_counter()
            exe.run(arrays, env)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}
