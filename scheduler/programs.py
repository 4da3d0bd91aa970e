"""Compiled programs as workers hold them: loaded once per artifact key, run one call at a time, and a run's
failure sorted into the caller's fault (`InvalidInput`) or not.

Thread workers and worker processes share this, so both answer a bad input alike; the language-model engines
load their programs through `LoadedProgram` too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from luminal.compiler.artifact import load_program
from luminal.compiler.program import target_kind
from luminal.runtime.reference import ExecutionError
from luminal.scheduler.compute_thread import ComputeThread


class InvalidInput(ValueError):
    """The inputs do not fit the program (shape, symbol range, index out of range): the caller's error."""


class LoadedProgram:
    def __init__(self, program, compute: ComputeThread | None = None):
        """`program` loaded, made ready here. A CPU program is made ready and run on `compute` where several
        threads run programs (scheduler/compute_thread.py): packing its weights is parallel C too, and any
        thread that runs parallel C keeps an OpenMP team."""
        self.compute = compute if compute is not None and target_kind(program.target) == "cpu" else None
        self.program = self._on_compute(program.prepare)
        # A CPU executable reuses one arena and one pointer table across calls, so calls must not overlap.
        self.lock = threading.Lock()

    def _on_compute(self, fn: Callable, *args):
        return fn(*args) if self.compute is None else self.compute.call(fn, *args)

    def run(self, inputs: dict[str, np.ndarray], device_outputs: bool = False) -> dict[str, np.ndarray]:
        """The program's outputs; with `device_outputs` (a CUDA program) as device arrays, donated inputs given as
        device arrays handed back written in place."""
        return self._on_compute(self._run, inputs, device_outputs)

    def _run(self, inputs: dict[str, np.ndarray], device_outputs: bool = False) -> dict[str, np.ndarray]:
        with self.lock:
            try:
                if device_outputs:
                    return self.program.executable.run(inputs, device_outputs=True)
                return self.program.run(inputs)
            except ExecutionError as e:
                raise InvalidInput(str(e)) from None
            except IndexError as e:  # the runtime's report of a gather/scatter index outside its tensor
                raise InvalidInput(str(e)) from None


class ProgramCache:
    """Loaded programs by artifact key, least recently used dropped first. Keys are content addresses, so a
    key always names the same program and a cached one never goes stale."""

    def __init__(self, path_of: Callable[[str], Path], max_loaded: int = 16, compute: ComputeThread | None = None):
        self.path_of = path_of
        self.max_loaded = max_loaded  # each loaded program holds its weights and arena in memory
        self.compute = compute  # where its CPU programs run; None: on the caller's thread
        self._loaded: OrderedDict[str, LoadedProgram] = OrderedDict()
        self._loading = threading.Lock()

    def get(self, key: str) -> LoadedProgram:
        with self._loading:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            loaded = LoadedProgram(load_program(self.path_of(key)), self.compute)
            self._loaded[key] = loaded
            while len(self._loaded) > self.max_loaded:
                self._loaded.popitem(last=False)
            return loaded
