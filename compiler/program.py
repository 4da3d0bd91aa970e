"""CompiledProgram: what `lm.compile` returns.

The optimizing pipeline (search, kernels, memory plan) is the compiler issue's work. Until it lands,
a program validates the graph at compile time and runs it through the reference interpreter.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from luminal.graph import Graph, GraphError

TARGETS = ("cpu", "reference")


class CompiledProgram:
    def __init__(self, graph: Graph, target: str):
        self.graph = graph
        self.target = target

    def run(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        from luminal.runtime.reference import execute

        return execute(self.graph, inputs, dims)

    def __repr__(self) -> str:
        return f"CompiledProgram(target={self.target!r}, runtime='reference', nodes={len(self.graph.nodes)})"


def compile_graph(graph: Graph, target: str = "cpu", **options: Any) -> CompiledProgram:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; available now: {', '.join(TARGETS)}")
    if options:
        raise TypeError(f"unknown compile option(s) {sorted(options)}")
    if not graph.outputs:
        raise GraphError("compile: the graph has no outputs; mark one with tensor.output(name)")
    unbound = graph.unbound_weights()
    if unbound:
        raise GraphError(f"compile: weight(s) {unbound[:8]} are not bound; call graph.bind(...) first")
    return CompiledProgram(graph, target)
