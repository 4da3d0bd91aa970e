"""The running generation engines of this process, one per compiled language model (by artifact key), started
on first use and kept while in use; the least recently used is closed when more than `max_loaded` are held
(each holds its weights, shared by its prefill and step programs, plus its caches)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from luminal.scheduler.compute_thread import ComputeThread
from luminal.scheduler.generation.chunked_prefill import PREFILL_CHUNK
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.generation.language_model import load_language_model
from luminal.scheduler.generation.stream import TokenStream
from luminal.scheduler.generation.waiting import MAX_WAITING


class Engines:
    def __init__(
        self,
        path_of: Callable[[str], Path],
        on_end: Callable[[TokenStream], None] | None = None,
        max_loaded: int = 4,
        max_waiting: int = MAX_WAITING,
        compute: ComputeThread | None = None,
    ):
        self.path_of, self.on_end = path_of, on_end
        self.compute = compute  # where the models' CPU programs run (None: on the engines' threads)
        self.max_loaded, self.max_waiting = max_loaded, max_waiting
        self._engines: OrderedDict[str, GenerationEngine] = OrderedDict()
        self._lock = threading.Lock()  # held while loading: two first requests load a model once

    def get(
        self, program_key: str, max_waiting: int | None = None, prefill_chunk: int = PREFILL_CHUNK
    ) -> GenerationEngine:
        """The started engine of `program_key` (blocking while it loads: call from a worker thread), made with
        its deployment's settings: its waiting line's bound (None: this registry's) and prompt tokens prefilled
        per round. Deployments of one compiled program (the same model deployed twice: artifacts are stored by
        digest) share its engine, made with the settings of the first one asked for."""
        with self._lock:
            engine = self._engines.get(program_key)
            if engine is None:
                model = load_language_model(self.path_of(program_key), compute=self.compute)
                bound = self.max_waiting if max_waiting is None else max_waiting
                engine = GenerationEngine(model, bound, self.on_end, prefill_chunk=prefill_chunk)
                engine.start()
                self._engines[program_key] = engine
                while len(self._engines) > self.max_loaded:
                    self._engines.popitem(last=False)[1].close()
            self._engines.move_to_end(program_key)
            return engine

    def snapshot(self) -> list[tuple[str, GenerationEngine]]:
        """The loaded engines by artifact key, for metrics (read without waiting for a load in progress)."""
        return list(self._engines.items())

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), OrderedDict()
        for engine in engines:
            engine.close()
