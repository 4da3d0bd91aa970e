"""Compiled programs as workers hold them: loaded once per artifact key, run one call at a time, and a run's
failure sorted into the caller's fault (`InvalidInput`) or not.

The gateway's direct backend and the scheduler's workers share this, so both answer a bad input alike.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from luminal.compiler.artifact import load_program
from luminal.runtime.reference import ExecutionError


class InvalidInput(ValueError):
    """The inputs do not fit the program (shape, symbol range, index out of range): the caller's error."""


class LoadedProgram:
    def __init__(self, program):
        self.program = program
        # A CPU executable reuses one arena and one pointer table across calls, so calls must not overlap.
        self.lock = threading.Lock()

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.lock:
            try:
                return self.program.run(inputs)
            except ExecutionError as e:
                raise InvalidInput(str(e)) from None
            except IndexError as e:  # the runtime's report of a gather/scatter index outside its tensor
                raise InvalidInput(str(e)) from None


class ProgramCache:
    """Loaded programs by artifact key, least recently used dropped first. Keys are content addresses, so a
    key always names the same program and a cached one never goes stale."""

    def __init__(self, path_of: Callable[[str], Path], max_loaded: int = 16):
        self.path_of = path_of
        self.max_loaded = max_loaded  # each loaded program holds its weights and arena in memory
        self._loaded: OrderedDict[str, LoadedProgram] = OrderedDict()
        self._loading = threading.Lock()

    def get(self, key: str) -> LoadedProgram:
        with self._loading:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            loaded = LoadedProgram(load_program(self.path_of(key)).prepare())
            self._loaded[key] = loaded
            while len(self._loaded) > self.max_loaded:
                self._loaded.popitem(last=False)
            return loaded
