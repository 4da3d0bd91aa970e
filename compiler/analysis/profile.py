"""Profiling candidates: each distinct candidate program is built and timed on the local runtime of its target.

Inputs are random arrays of each input's dtype at concrete dims (`dims`, else every symbol at the smaller of
its declared maximum and PROFILE_DIM). The result is the median of a few runs after a warm-up, per
candidate; candidates are timed one after another, in turn, so slow drift on a shared machine hits all alike.
A cpu target's candidates run on the CPU runtime, timed by the host's clock. A CUDA target's run on this
machine's GPU, which must be the target's (an A100's timings would rank candidates for an h100 wrongly), each
forward pass one CUDA graph launch timed with CUDA events. Where that cannot be done, profiling raises
RuntimeUnavailable naming what is missing, as a cpu target without a C compiler does: a compile without
profile=True ranks the candidates by the target's roofline instead.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping

import numpy as np

from luminal import dtypes as dt
from luminal.compiler.analysis.targets import get_target
from luminal.compiler.backends import run_plan
from luminal.compiler.kernels import ir
from luminal.graph import Graph

PROFILE_DIM = 128
ROUNDS = 5
GRAPH_REPEATS = 3  # graph launches timed per candidate and round (each run first copies the inputs in)


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
    programs: Mapping[str, tuple[Graph, ir.KernelProgram, str]],
    dims: Mapping[str, int] | None = None,
    target: str = "cpu",
) -> dict[str, float]:
    """Median seconds of one run of each candidate program (graph, kernels, source) compiled for `target`."""
    from luminal.runtime.registry import RuntimeUnavailable  # here: the compiler imports no runtime at import

    kind = get_target(target).kind
    if kind == "cuda":
        return time_on_cuda(programs, dims, target)
    if kind != "cpu":
        raise RuntimeUnavailable(f"profile=True: no profiler for {kind} targets yet ({target}); compile without it")
    from luminal.runtime.cpu import CpuExecutable

    built, arrays, env = {}, None, None
    for name, (graph, kernels, source) in programs.items():
        built[name] = CpuExecutable(graph, kernels, source, graph.weight_data, plan=run_plan(kernels, target))
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


def cuda_device(target: str):
    """CuPy, once this machine is known to have a GPU of `target`'s kind to time on; else RuntimeUnavailable."""
    from luminal.runtime.cuda import missing
    from luminal.runtime.cuda.devices import local_gpus
    from luminal.runtime.registry import RuntimeUnavailable

    reason = missing()
    if reason is None:
        import cupy

        gpu = next((g for g in local_gpus() if g.index == cupy.cuda.Device().id), None)
        if gpu is None or gpu.target != target:
            found = "an unknown device" if gpu is None else f"{gpu.name} (target {gpu.target})"
            reason = f"the current CUDA device is {found}, not a GPU of target {target}"
        else:
            return cupy
    raise RuntimeUnavailable(
        f"profile=True times the {target} candidates on this machine's {target} GPU and cannot here: {reason}. "
        f"Compile without profile=True to rank them by the {target} roofline."
    )


def load_on_cuda(cp, graph: Graph, kernels: ir.KernelProgram, source: str):
    from luminal.compiler.cuda.program import run_plan as cuda_run_plan  # the same for every CUDA target
    from luminal.runtime.cuda.executable import CudaExecutable

    return CudaExecutable(cp, graph, kernels, source, graph.weight_data, plan=cuda_run_plan(kernels))


def time_on_cuda(
    programs: Mapping[str, tuple[Graph, ir.KernelProgram, str]], dims: Mapping[str, int] | None, target: str
) -> dict[str, float]:
    """Median seconds of each candidate's forward pass as one CUDA graph launch, timed with CUDA events."""
    cp = cuda_device(target)
    built = {name: load_on_cuda(cp, *program) for name, program in programs.items()}
    arrays, env = profile_inputs(next(iter(programs.values()))[0], dims)
    times: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(ROUNDS):
        for name, exe in built.items():
            times[name] += exe.time_graph(arrays, env, GRAPH_REPEATS)
    return {name: statistics.median(t) for name, t in times.items()}
