"""CompiledProgram: what `lm.compile` returns, and the pipeline of named stages that builds it.

Stages today: the deterministic passes (compiler/passes.py), lowering to the kernel IR (one kernel per
compute node, views folded into loads), C code generation, and the CPU runtime. The e-graph search that
fuses kernels is the next stage to land. `LUMINAL_DEBUG=all` (or a comma list of stage names) prints each
stage's graph.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping

import numpy as np

from luminal.compiler import codegen_c, ir, memory
from luminal.compiler.fuse import fuse_single_consumers
from luminal.compiler.lower import lower
from luminal.compiler.passes import PASSES
from luminal.compiler.targets import get_target
from luminal.graph import Graph, GraphError

TARGETS = ("cpu", "reference")


def _debug(stage: str, graph: Graph) -> None:
    wanted = os.environ.get("LUMINAL_DEBUG", "")
    if wanted == "all" or stage in wanted.split(","):
        print(f"== stage {stage} ==")
        graph.display()


class CompiledProgram:
    def __init__(self, graph: Graph, target: str, kernels: ir.KernelProgram | None, source: str, report: dict):
        self.graph = graph  # the graph after the deterministic passes
        self.target = target
        self.kernels = kernels
        self.source = source
        self.report = report
        self._executable = None

    def run(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        if self.target == "reference":
            from luminal.runtime.reference import execute

            return execute(self.graph, inputs, dims)
        if self._executable is None:
            from luminal.runtime.cpu import CpuRuntime

            self._executable = CpuRuntime().load(self)
        return self._executable.run(inputs, dims)

    def __repr__(self) -> str:
        n = len(self.kernels.kernels) if self.kernels else 0
        return f"CompiledProgram(target={self.target!r}, nodes={len(self.graph.nodes)}, kernels={n})"


def c_source(kernels: ir.KernelProgram) -> str:
    """The generated C for `kernels` (also how a loaded artifact's stored source is checked)."""
    slots = {name: k for k, name in enumerate(sorted(kernels.buffers))}
    return codegen_c.program_source(kernels, slots, sorted(kernels.symbols))


def compile_graph(graph: Graph, target: str = "cpu", *, cache: bool = True, **options: Any) -> CompiledProgram:
    """Compile `graph` for `target`, or load it from the compile cache (compiler/cache.py) unless cache=False."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; available now: {', '.join(TARGETS)}")
    if options:
        raise TypeError(f"unknown compile option(s) {sorted(options)}")
    if not graph.outputs:
        raise GraphError("compile: the graph has no outputs; mark one with tensor.output(name)")
    unbound = graph.unbound_weights()
    if unbound:
        raise GraphError(f"compile: weight(s) {unbound[:8]} are not bound; call graph.bind(...) first")
    if not cache:
        return _compile(graph, target)
    from luminal.compiler.cache import compile_cached  # here: cache -> artifact -> program would be circular

    return compile_cached(graph, target, _compile)


def _compile(graph: Graph, target: str) -> CompiledProgram:
    """The pipeline: passes, then (for kernel targets) lowering, fusion, code generation, memory report."""
    report: dict[str, Any] = {"stages": []}
    for name, run_pass in PASSES:
        start = time.perf_counter()
        graph = run_pass(graph)
        report["stages"].append({"stage": name, "nodes": len(graph.nodes), "seconds": time.perf_counter() - start})
        _debug(name, graph)
    if target == "reference":
        return CompiledProgram(graph, target, None, "", report)
    kernels = lower(graph)
    unfused = len(kernels.kernels)
    kernels = fuse_single_consumers(kernels, get_target(target))
    report["stages"].append({"stage": "fusion", "kernels_before": unfused, "kernels_after": len(kernels.kernels)})
    source = c_source(kernels)
    report["stages"].append({"stage": "lower+codegen", "kernels": len(kernels.kernels)})
    report["memory"] = memory.describe(kernels)  # arena vs naive bytes, at the symbols' maxima when dims are symbolic
    return CompiledProgram(graph, target, kernels, source, report)
