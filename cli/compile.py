"""`luminal compile FILE`: compile a .lgraph locally (no server) and print what the compiler did."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from luminal.cli.common import fail, out, print_table


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _stage_seconds(stage: dict[str, Any]) -> float | None:
    seconds = stage.get("seconds")
    return seconds.get("total") if isinstance(seconds, dict) else seconds  # the search reports its parts


def _detail(stage: dict[str, Any]) -> str | None:
    if stage["stage"] != "search" or not stage.get("egraph_nodes"):
        return None
    return f"e-graph {stage['egraph_nodes'][-1]} nodes after {stage.get('iterations')} iterations ({stage.get('stop')})"


def print_report(report: dict[str, Any]) -> None:
    """The stages with their times and graph sizes, the chosen candidate, kernel counts, and peak memory."""
    rows = []
    for stage in report.get("stages", []):
        seconds = _stage_seconds(stage)
        size = stage.get("nodes", stage.get("graph_nodes", stage.get("kernels")))
        rows.append((stage["stage"], size, "-" if seconds is None else f"{seconds * 1000:.1f}", _detail(stage)))
    print_table(("STAGE", "NODES/KERNELS", "MS", "DETAIL"), rows, empty="No stages ran.")
    if "choice" in report:
        estimated = {c["name"]: c["estimated_s"] for c in report.get("candidates", [])}
        out.print(f"candidates: {len(estimated)}, chosen: {report['choice']}", highlight=False, markup=False)
    kernels = report.get("kernels")
    if kernels:
        out.print(
            f"kernels: {kernels['kernels']} ({kernels['gemm']} GEMM with {kernels['gemm_epilogue_ops']} fused "
            "epilogue ops)",
            highlight=False,
            markup=False,
        )
    memory = report.get("memory")
    if memory:
        naive, arena = memory["naive_bytes"], memory["arena_bytes"]
        saved = f", {naive / arena:.1f}x less" if arena else ""
        out.print(
            f"peak memory: {_size(arena)} planned vs {_size(naive)} naive{saved} ({memory['bound']})",
            highlight=False,
            markup=False,
        )
    cache = report.get("cache")
    if cache:
        out.print(f"compile cache: {'hit' if cache['hit'] else 'miss'}", highlight=False, markup=False)


def compile_file(
    file: Annotated[Path, typer.Argument(help="the .lgraph file")],
    target: Annotated[str, typer.Option(help="the compile target")] = "cpu",
    out_file: Annotated[Path | None, typer.Option("--out", help="write the compiled program (.lprog) here")] = None,
) -> None:
    """Compile FILE on this machine and print the compile report; no server needed."""
    import luminal as lm
    from luminal.compiler.artifact import save_program
    from luminal.graph import GraphError
    from luminal.graph_json import GraphFileError

    if not file.is_file():
        fail(f"{file}: no such file")
    try:
        graph = lm.load(file)
    except (GraphFileError, OSError) as e:
        fail(f"{file}: not a valid .lgraph file: {e}")
    try:
        program = lm.compile(graph, target=target)
    except (ValueError, GraphError, NotImplementedError) as e:
        fail(f"cannot compile {file.name} for {target!r}: {e}")
    out.print(f"Compiled {file.name} for {target}.", highlight=False, markup=False)
    print_report(program.report)
    if out_file is not None:
        try:
            save_program(program, out_file)
        except OSError as e:
            fail(f"cannot write {out_file}: {e}")
        out.print(f"Wrote {out_file}.", highlight=False, markup=False)
