"""The compile cache: compiled programs on disk, keyed by (graph hash, target, compiler version).

The graph hash is sha256 of the graph's structure and every weight's bytes (what its `.lgraph` holds): two
graphs that differ only in a weight value get different programs (constant folding may have baked the weights
into kernels, and the artifact carries the weights the program runs with). Hashing costs one pass over the
weights, far less than a compile. Directory: `$LUMINAL_CACHE_DIR/programs`, else `~/.cache/luminal/programs`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from luminal.compiler import COMPILER_VERSION
from luminal.compiler.artifact import ArtifactError, graph_hash, load_program, save_program
from luminal.compiler.program import CompiledProgram
from luminal.compiler.storage.gc_pause import collector_paused
from luminal.graph import Graph


def cache_dir() -> Path:
    root = os.environ.get("LUMINAL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "luminal")
    return Path(root) / "programs"


def cache_key(source_hash: str, target: str, options: Mapping[str, Any] | None = None) -> str:
    shown = json.dumps({k: repr(v) for k, v in (options or {}).items()}, sort_keys=True)  # options change programs
    return hashlib.sha256(f"{source_hash}\0{target}\0{COMPILER_VERSION}\0{shown}".encode()).hexdigest()


def compile_cached(
    graph: Graph, target: str, options: Mapping[str, Any], compile_fn: Callable[..., CompiledProgram]
) -> CompiledProgram:
    """Load the cached program for (graph, target), or compile it with `compile_fn` and store it.

    The report's "cache" entry says which happened ({"hit", "key", "seconds"}). A corrupt or stale entry is a
    miss that the fresh compile overwrites; a cache directory that cannot be written never fails a compile.
    """
    start = time.perf_counter()
    with collector_paused():
        source_hash = graph_hash(graph)
    key = cache_key(source_hash, target, options)
    path = cache_dir() / f"{key}.lprog"
    prog = None
    if path.is_file():
        try:
            prog = load_program(path, target, source_hash)
        except (ArtifactError, OSError):
            prog = None
    hit = prog is not None
    if prog is None:
        prog = compile_fn(graph, target, options)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            save_program(prog, path, source_hash)
        except OSError:
            pass  # read-only or full disk: the program is still good, only not cached
    prog.report["cache"] = {"hit": hit, "key": key, "seconds": time.perf_counter() - start}
    return prog
