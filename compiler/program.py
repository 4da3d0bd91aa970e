"""CompiledProgram: what `lm.compile` returns, and the pipeline of named stages that builds it.

Stages: the deterministic passes (compiler/graph/passes.py); the e-graph search (compiler/search/stage.py), which
yields candidate graphs; for each candidate, lowering to the kernel IR (one kernel per compute node, views
folded into loads), fusion (as the search chose, compiler/fusion/fuse_chosen.py, then the single-consumer
policy, compiler/fusion/fuse.py) and the target's backend's passes; selection of one candidate by the roofline
cost model or, with profile=True, by timing (compiler/analysis/profile.py); code generation by the backend. The
backend (compiler/backends.py: cpu/, cuda/, metal/, each exporting its passes and its generator of C, CUDA C++
or MSL) is looked up by the target's kind: the pipeline has no branch on it.
`LUMINAL_DEBUG=all` (or a comma list of stage names) prints each stage's graph; `program.report` holds the
stages, e-graph sizes, what each rule set found, the candidates with their estimated (and measured) costs, and
the choice.
"""

from __future__ import annotations

import os
import time
from dataclasses import fields
from typing import Any, Mapping

import numpy as np

from luminal import dtypes as dt
from luminal.compiler import backends
from luminal.compiler.analysis import memory
from luminal.compiler.analysis.cost import estimate_program
from luminal.compiler.analysis.gemm_plan import plan as gemm_plan
from luminal.compiler.analysis.targets import get_target
from luminal.compiler.fusion.fuse import fuse_single_consumers
from luminal.compiler.fusion.fuse_chosen import fuse_chosen
from luminal.compiler.graph.fused_ops import Inline
from luminal.compiler.graph.passes import PASSES
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.derived_weights import derived_bytes
from luminal.compiler.kernels.fold_indices import fold_indices
from luminal.compiler.kernels.half_activations import check_mode
from luminal.compiler.kernels.lower import buffer_name, lower
from luminal.compiler.storage.run_plan import RunPlan
from luminal.graph import Graph, GraphError

# The interpreter, and every target whose kind has a backend (compiler/backends.py).
TARGETS = ("reference", *backends.COMPILED_TARGETS)


def target_kind(target: str) -> str:
    """The kind of runtime a target's programs need: "reference", or the target's kind (cpu, cuda, metal)."""
    return "reference" if target == "reference" else get_target(target).kind


def _debug(stage: str, graph: Graph) -> None:
    wanted = os.environ.get("LUMINAL_DEBUG", "")
    if wanted == "all" or stage in wanted.split(","):
        print(f"== stage {stage} ==")
        graph.display()


class CompiledProgram:
    def __init__(self, graph: Graph, target: str, kernels: ir.KernelProgram | None, source: str, report: dict,
                 plan: RunPlan | None = None):  # fmt: skip
        self.graph = graph  # the graph after the deterministic passes
        self.target = target
        self.kernels = kernels
        self.source = source
        self.report = report
        self._plan = plan
        self._executable = None

    @property
    def plan(self) -> RunPlan | None:
        """What the runtime reads besides the IR and the source (compiler/storage/run_plan.py): the artifact's for
        a loaded program, else made by the backend when first asked for; None for the reference target."""
        if self._plan is None and self.kernels is not None:
            self._plan = backends.run_plan(self.kernels, self.target)
        return self._plan

    def prepare(self) -> CompiledProgram:
        """Make it ready to run now (the C library built or loaded from the cache, weights packed) instead of in
        the first `run`: a serving worker does this before it reports ready, so no request pays for it. The
        runtime is the one registered for the target's kind; where it cannot run here it raises
        `luminal.runtime.RuntimeUnavailable`."""
        if self._executable is None:
            from luminal.runtime.registry import runtime_for  # at run time: the compiler imports no runtime

            self._executable = runtime_for(target_kind(self.target)).load(self)
        return self

    @property
    def executable(self) -> Any:
        """The runtime's executable of this program (prepared now if it was not): what a caller asks for options
        `run` does not take, as a CUDA run's device outputs."""
        return self.prepare()._executable

    def run(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        return self.prepare()._executable.run(inputs, dims)

    def __repr__(self) -> str:
        n = len(self.kernels.kernels) if self.kernels else 0
        return f"CompiledProgram(target={self.target!r}, nodes={len(self.graph.nodes)}, kernels={n})"


def c_source(kernels: ir.KernelProgram) -> str:
    """The generated C for `kernels`."""
    return backends.program_source(kernels, "cpu")


OPTIONS = {
    "search": "run the e-graph search (default True); False compiles the graph as the passes leave it",
    "profile": "time every distinct candidate on the local runtime (a CUDA target: on its GPU) and keep the fastest",
    "profile_dims": "symbol values to profile at (default: each symbol at min(its max, 128))",
    "search_options": "a compiler.search.stage.SearchOptions (node budget, iterations, deadline, isolation)",
    "gemm_library": "CUDA targets: 'auto' (default) adds each candidate's variant with cuBLAS GEMM steps where the "
    "roofline prefers them; 'always' gives cuBLAS every GEMM it can compute alone; 'never' keeps generated kernels",
    "activation_dtype": "CUDA and Metal targets: 'auto' (default) stores each temporary buffer that holds only half "
    "values (a bf16 or fp16 model's activations) in its half type (compiler/kernels/half_activations.py); "
    "'float32' keeps float32",
}


def compile_graph(graph: Graph, target: str = "cpu", *, cache: bool = True, **options: Any) -> CompiledProgram:
    """Compile `graph` for `target`, or load it from the compile cache (compiler/storage/cache.py) unless
    cache=False."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; available now: {', '.join(TARGETS)}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"unknown compile option(s) {unknown}; known: {sorted(OPTIONS)}")
    if "activation_dtype" in options:
        check_mode(options["activation_dtype"])
    if not graph.outputs:
        raise GraphError("compile: the graph has no outputs; mark one with tensor.output(name)")
    unbound = graph.unbound_weights()
    if unbound:
        raise GraphError(f"compile: weight(s) {unbound[:8]} are not bound; call graph.bind(...) first")
    narrow = sorted({n.dtype.name for n in graph.nodes if n.dtype in dt.STORAGE_ONLY})
    if narrow and target != "reference":
        raise dt.DTypeError(
            f"compile: {', '.join(narrow)} values are for the reference interpreter only (no target stores 2-, 4- "
            "or 8-bit storage types yet); cast them to int8/uint8/float32 where the model reads or writes them"
        )
    if not cache:
        return _compile(graph, target, options)
    from luminal.compiler.storage.cache import compile_cached  # here: cache -> artifact -> program would be circular

    return compile_cached(graph, target, options, _compile)


def _compile(graph: Graph, target: str, options: Mapping[str, Any]) -> CompiledProgram:
    """The pipeline: passes, then (for kernel targets) search, candidates, selection, code generation."""
    report: dict[str, Any] = {"stages": []}
    for name, run_pass in PASSES:
        start = time.perf_counter()
        graph = run_pass(graph)
        report["stages"].append({"stage": name, "nodes": len(graph.nodes), "seconds": time.perf_counter() - start})
        _debug(name, graph)
    if target == "reference":
        return CompiledProgram(graph, target, None, "", report)
    candidates = {"unsearched": graph}
    donated = dict(graph.donated)  # what the caller gave up, for every candidate (a search rebuilds the graph)
    if options.get("search", True):
        from luminal.compiler.search.stage import search

        start = time.perf_counter()
        found = search(graph, target, options.get("search_options"))
        candidates.update(found.candidates)
        seconds = {**found.report["seconds"], "total": time.perf_counter() - start}  # encode, rules, extract
        report["stages"].append({"stage": "search", **found.report, "seconds": seconds})
        _debug("search", found.candidates["search"])
    for candidate in candidates.values():
        candidate.donated = {o: i for o, i in donated.items() if o in candidate.outputs and i in candidate.inputs}
    chosen, kernels, report["candidates"] = select(candidates, target, options)
    report["choice"] = chosen
    backend = backends.backend_for(target)
    # The GPU backends' merges (sibling GEMMs, copies beside thread kernels, derived weights) run on the chosen
    # program only: what was ranked is not yet what ships (issue 46 moves them before ranking).
    kernels = backend.after_choice(kernels)
    source = backend.program_source(kernels)
    report["stages"].append({"stage": "lower+fuse+codegen", "kernels": len(kernels.kernels)})
    report["kernels"] = kernel_summary(kernels)
    # arena vs naive bytes, at the symbols' maxima when dims are symbolic
    report["memory"] = memory.describe(kernels, together=backend.launched_together(kernels))
    report["memory"]["derived_bytes"] = derived_bytes(kernels)  # computed at load, resident beside the weights
    return CompiledProgram(graph, target, kernels, source, report)


def kernel_program(
    graph: Graph, target: str, searched: bool = True, stats: dict | None = None, activation_dtype: str = "auto"
) -> ir.KernelProgram:
    """Lowering (one kernel per node), fusion, and the buffers of weights packed at load, for one candidate.

    A searched graph gets the fusion the search chose (its Inline nodes), then the single-consumer policy for
    what the search could not see: a graph searched in segments (its layers) never fuses across a cut. An
    unsearched graph gets the policy alone. `stats` (when given) says what each did. `activation_dtype` is the
    compile option of that name.
    """
    marked = chosen_fusions(graph) if searched else None
    return fused_program(lower(graph), marked, graph.donated, target, {} if stats is None else stats, activation_dtype)


def chosen_fusions(graph: Graph) -> frozenset[str]:
    """The buffers a searched graph chose to compute in their readers (its Inline nodes)."""
    return frozenset(buffer_name(n.id) for n in graph.nodes if isinstance(n.op, Inline))


def fused_program(
    kernels: ir.KernelProgram,
    marked: frozenset[str] | None,
    donated: Mapping[str, str],
    target: str,
    stats: dict,
    activation_dtype: str,
) -> ir.KernelProgram:
    """`kernel_program` after lowering: `marked` the chosen fusions (None: an unsearched graph), `donated` the
    graph's donated outputs."""
    backend = backends.backend_for(target)
    if marked is not None:
        kernels = fuse_chosen(kernels, marked, get_target(target), stats=stats)
    before = len(kernels.kernels)
    kernels = backend.fuse(fuse_single_consumers(kernels, get_target(target)), target)
    stats["fused_by_policy"] = before - len(kernels.kernels)
    kernels = fold_indices(kernels)  # what fusion's and views' reshapes left: divisions by launch-time sizes
    return backend.passes(kernels, donated, target, activation_dtype)


def kernel_summary(kernels: ir.KernelProgram) -> dict[str, int]:
    """What the program became: GEMM kernels (with the epilogue ops fused into them), attention kernels, and
    the other kernels."""
    gemms = [k for k in kernels.kernels if gemm_plan(k) is not None]
    epilogue_ops = sum(len({n for n in ir.walk(gemm_plan(k).epilogue) if isinstance(n, ir.Apply)}) for k in gemms)
    attention = sum(isinstance(k, ir.LoopKernel) and isinstance(k.body, ir.Attend) for k in kernels.kernels)
    return {
        "kernels": len(kernels.kernels),
        "gemm": len(gemms),
        "gemm_epilogue_ops": epilogue_ops,
        "attention": attention,
        "library_gemm": len(kernels.library),  # GEMMs computed by a library call (cuBLAS) instead of a kernel
    }


def _snapshot(program: ir.KernelProgram) -> ir.KernelProgram:
    """A copy of `program`'s tables (its kernels and buffers are immutable), for comparing it later."""
    tables = {f.name: getattr(program, f.name) for f in fields(program)}
    return ir.KernelProgram(**{name: type(table)(table) for name, table in tables.items()})


def select(
    candidates: Mapping[str, Graph], target: str, options: Mapping[str, Any]
) -> tuple[str, ir.KernelProgram, list[dict[str, Any]]]:
    """Compile every candidate, drop duplicates (same source), rank by the cost model, or by timing with
    profile=True on the target's runtime here (compiler/analysis/profile.py: a CUDA target on its GPU, or it raises)."""
    rows, programs, seen, backend = [], {}, {}, backends.backend_for(target)
    built: list[tuple[tuple, tuple[ir.KernelProgram, dict[str, int]]]] = []
    for candidate, graph in candidates.items():
        lowered = lower(graph)
        marked = chosen_fusions(graph) if candidate != "unsearched" else None
        # Candidates that lower alike with the same fusions chosen (a search whose GEMM rules found nothing)
        # share one run of the passes: they are most of a small graph's compile.
        key = (_snapshot(lowered), marked, dict(graph.donated))
        done = next((made for k, made in built if k == key), None)
        if done is None:
            fusion: dict[str, int] = {}
            activations = options.get("activation_dtype", "auto")
            done = fused_program(lowered, marked, graph.donated, target, fusion, activations), fusion
            built.append((key, done))
        generated, fusion = done[0], dict(done[1])
        library = options.get("gemm_library", "auto")
        for name, kernels in backend.variants(candidate, generated, target, library):
            source = backend.program_source(kernels)
            estimated = estimate_program(kernels, target).seconds
            row = {"name": name, "kernels": len(kernels.kernels), "estimated_s": estimated}
            row["fusion"] = fusion  # reads fused as the search chose, declined; kernels fused by the policy after
            if kernels.library:
                row["library_gemms"] = len(kernels.library)
            if source in seen:
                row["same_as"] = seen[source]
            else:
                seen[source] = name
                programs[name] = (graph, kernels, source)
            rows.append(row)
    ranked = sorted(programs, key=lambda n: next(r["estimated_s"] for r in rows if r["name"] == n))
    if options.get("gemm_library") == "always" and any(programs[n][1].library for n in ranked):
        ranked = [n for n in ranked if programs[n][1].library]  # asked for cuBLAS: a candidate that has some
    if options.get("profile"):
        from luminal.compiler.analysis.profile import time_candidates

        measured = time_candidates({n: programs[n] for n in ranked}, options.get("profile_dims"), target)
        for row in rows:
            if row["name"] in measured:
                row["seconds"] = {"measured_median": measured[row["name"]]}
        ranked.sort(key=lambda n: measured[n])
    best = ranked[0]
    return best, programs[best][1], rows
