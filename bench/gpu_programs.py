"""The bench's compiled programs: compiled in the run (lm.compile, which needs egglog), or written ahead by
`bench/gpu.py --precompile DIR` on a machine with the compiler and read back with `--programs DIR` on one
without (the GPU machine has no egglog unless it travels as a wheel).

A precompiled program is the compiler's own artifact (compiler/artifact.py) gzipped, compiled from the graph
bound to zero weights: compiling reads shapes only, the zeros compress to nothing, so a 2 GB model's program is
a small file, and the real weights are given to the runtime when the program is loaded.
"""

from __future__ import annotations

import gzip
import time
from dataclasses import dataclass
from pathlib import Path

import luminal as lm
from luminal.compiler.artifact import load_program, program_to_bytes
from luminal.compiler.program import CompiledProgram

SUFFIX = ".lprog.gz"


@dataclass
class Compiled:
    program: CompiledProgram
    seconds: float  # compile (or read) time
    how: str  # "compiled" or "read from DIR"


class Programs:
    """Programs by name for one target: `get(name, graph)` compiles or reads; `save` writes for --programs."""

    def __init__(self, target: str, folder: Path | None = None) -> None:
        self.target, self.folder = target, folder

    def path(self, name: str) -> Path:
        return self.folder / f"{name}{SUFFIX}"

    def check(self, names: list[str]) -> None:
        """Fail at once, before any weights are drawn, when the folder lacks some program the run needs."""
        if self.folder is None:
            return
        missing = [name for name in names if not self.path(name).is_file()]
        if missing:
            raise FileNotFoundError(
                f"no precompiled program {self.path(missing[0])} ({len(missing)} missing): "
                f"run bench/gpu.py --precompile {self.folder} with the same sizes (--small or not) and --target"
            )

    def get(self, name: str, graph: lm.Graph, **options) -> Compiled:
        """`options` are lm.compile's (a precompiled program was compiled with the same, by --precompile)."""
        start = time.perf_counter()
        if self.folder is None:
            prog = lm.compile(graph, self.target, cache=False, **options)  # a fresh compile: its time is reported
            return Compiled(prog, time.perf_counter() - start, "compiled")
        path = self.path(name)
        if not path.is_file():
            raise FileNotFoundError(f"no precompiled program {path}: run bench/gpu.py --precompile {self.folder}")
        prog = load_program(gzip.decompress(path.read_bytes()), target=self.target)
        missing = sorted(set(graph.outputs) ^ set(prog.graph.outputs))
        if missing:
            raise ValueError(f"{path} was compiled from another graph (outputs {missing[:4]} differ): recompile")
        return Compiled(prog, time.perf_counter() - start, f"read from {self.folder}")

    def save(self, name: str, prog: CompiledProgram) -> int:
        """Write `prog` under `name`; returns the file's size in bytes."""
        self.folder.mkdir(parents=True, exist_ok=True)
        # Level 9: the 1.1 B model's 2.2 GB of zeros shrink to ~2 MB (level 1 leaves ~10 MB), ~30 s each.
        data = gzip.compress(program_to_bytes(prog), compresslevel=9)
        self.path(name).write_bytes(data)
        return len(data)
