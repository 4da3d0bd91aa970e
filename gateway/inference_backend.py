"""Where the gateway sends an inference: behind one small Protocol, so the scheduler and batcher of the next
slice replace the direct call without touching the routers.

`DirectBackend` runs the deployment's compiled program in a worker thread of this process. Loaded programs are
cached by their artifact key (content-addressed, so a key always names the same program).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import anyio.to_thread
import numpy as np

from luminal.compiler.artifact import load_program
from luminal.gateway.store.artifacts import ArtifactStore
from luminal.runtime.reference import ExecutionError


@dataclass(frozen=True)
class DeploymentRef:
    """What an inference needs to know about its deployment (a plain value, safe to pass between threads)."""

    deployment_id: int
    tenant_id: int
    program_key: str


class InvalidInput(ValueError):
    """The inputs do not fit the program (shape, symbol range, index out of range): the caller's error."""


class InferenceBackend(Protocol):
    async def infer(self, deployment: DeploymentRef, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


class _LoadedProgram:
    def __init__(self, program):
        self.program = program
        # A CPU executable reuses one arena and one pointer table across calls, so calls must not overlap.
        self.lock = threading.Lock()


class DirectBackend:
    """Runs the program in-process, one call at a time per program (no batching)."""

    def __init__(self, artifacts: ArtifactStore, max_loaded: int = 16):
        self.artifacts = artifacts
        self.max_loaded = max_loaded  # each loaded program holds its weights and arena in memory
        self._loaded: OrderedDict[str, _LoadedProgram] = OrderedDict()
        self._loading = threading.Lock()

    def _program(self, key: str) -> _LoadedProgram:
        with self._loading:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            loaded = _LoadedProgram(load_program(self.artifacts.local_path(key)))
            self._loaded[key] = loaded
            while len(self._loaded) > self.max_loaded:
                self._loaded.popitem(last=False)
            return loaded

    def _run(self, key: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        loaded = self._program(key)
        with loaded.lock:
            try:
                return loaded.program.run(inputs)
            except ExecutionError as e:
                raise InvalidInput(str(e)) from None
            except IndexError as e:  # the runtime's report of a gather/scatter index outside its tensor
                raise InvalidInput(str(e)) from None

    async def infer(self, deployment: DeploymentRef, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return await anyio.to_thread.run_sync(self._run, deployment.program_key, inputs)
