"""The generation engines running in this process, held by its language-model workers (llm_worker.py) and listed
by the compiled program they serve: what the gateway's metrics read at scrape time, and what tests and benchmarks
look into. Workers add their engine once it is ready and remove it when they stop."""

from __future__ import annotations

import threading

from luminal.scheduler.generation.engine import GenerationEngine


class Engines:
    def __init__(self) -> None:
        self._engines: list[tuple[str, GenerationEngine]] = []
        self._changed = threading.Condition()

    def add(self, program_key: str, engine: GenerationEngine) -> None:
        with self._changed:
            self._engines.append((program_key, engine))
            self._changed.notify_all()

    def remove(self, engine: GenerationEngine) -> None:
        with self._changed:
            self._engines = [(k, e) for k, e in self._engines if e is not engine]

    def snapshot(self) -> list[tuple[str, GenerationEngine]]:
        """The running engines by artifact key (one per worker: a program served by two workers is listed twice)."""
        with self._changed:
            return list(self._engines)

    def get(self, program_key: str, timeout_s: float = 60.0) -> GenerationEngine:
        """The first running engine of `program_key`, waiting up to `timeout_s` for a worker to start one;
        LookupError when none did."""
        with self._changed:
            found = self._changed.wait_for(lambda: self._first(program_key), timeout_s)
        if found is None:
            raise LookupError(f"no engine of program {program_key[:12]} started in {timeout_s:g} s")
        return found

    def _first(self, program_key: str) -> GenerationEngine | None:
        return next((e for k, e in self._engines if k == program_key), None)
