"""A language-model worker's LoRA adapters added to its live deployment: the ones its spec named when it started,
then whatever its deployment's board (sequences/adapter_board.py) says, read between rounds.

A posted adapter is fetched from the artifact store, checked again (the board and the store are read as hostile:
factors that do not pair up, do not fit the model's stacks or hold NaN or inf are refused) and written into a free
slot, which no running row reads, so the batch goes on. One that cannot be loaded is kept with the reason, which
the worker reports (WorkerLoad.adapter_errors) and the gateway answers with; the worker serves on. A removed one is
refused to new sequences at once; the sequences already running with it finish with it, and its slot is freed once
the last of them ends (GenerationEngine.remove_adapter). Adapters packed with the model are never touched here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np

from luminal.lora_adapter import LoraAdapter, LoraRefused
from luminal.lora_package import decode_adapters
from luminal.scheduler.generation.engine import GenerationEngine
from luminal.scheduler.sequences.adapter_board import AdapterBoard

log = logging.getLogger(__name__)
MAX_REASON_CHARS = 300  # of a reported load failure: a report crosses Redis every second


def check_factors(adapter: LoraAdapter) -> None:
    """LoraRefused unless each projection's A [in, rank] and B [rank, out] pair up and hold finite numbers: a
    NaN in one adapter's slot must not reach the rows of others."""
    for path, (a, b) in adapter.factors.items():
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise LoraRefused(f"LoRA adapter: {path} has A {a.shape} and B {b.shape}, which do not pair up")
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            raise LoraRefused(f"LoRA adapter: {path} holds NaN or infinite values")


class LiveAdapters:
    def __init__(self, deployment_id: int, board: AdapterBoard, path_of: Callable[[str], Path]):
        self.deployment_id, self.board, self.path_of = deployment_id, board, path_of
        self.loaded: dict[str, str] = {}  # adapter name -> artifact key, for the adapters this loaded
        self.failed: dict[str, tuple[str, str]] = {}  # adapter name -> (artifact key, why it could not be loaded)

    def start(self, engine: GenerationEngine, adapters: tuple[tuple[str, str], ...]) -> None:
        """Load the spec's adapters (name, artifact key) as the worker loads its model, then follow the board,
        which may have changed since the spec was read (a board that does not read leaves the spec's)."""
        for name, key in adapters:
            self._load(engine, name, key)
        self.follow(engine)

    def follow(self, engine: GenerationEngine) -> bool:
        """Between rounds: free the slots of removed adapters whose last sequence ended, then follow the board
        (loading again what failed for want of a slot once one is freed); whether what the engine holds changed,
        so the worker reports at once. A board that does not read (Redis away) is read next time."""
        bank = engine.model.lora
        if bank is None:
            return False
        retiring = len(bank.retiring)
        engine.release_retired()
        freed = len(bank.retiring) != retiring
        try:
            changed = self.sync(engine, retry=freed)
        except Exception as e:  # a transport error: the worker serves on
            log.warning("reading the posted LoRA adapters failed: %s", e)
            changed = False
        return changed or freed

    def sync(self, engine: GenerationEngine, retry: bool = False) -> bool:
        """Follow the board (between rounds); whether anything changed, so the worker reports at once. `retry`:
        load again the adapters that failed (a slot was freed since)."""
        posted = self.board.adapters(self.deployment_id)
        if posted is None:  # nothing posted yet: what the spec said stands
            return False
        changed = False
        for name, key in list(self.loaded.items()):
            if posted.get(name) != key:  # removed (or replaced under its name)
                engine.remove_adapter(name)
                del self.loaded[name]
                changed = True
        for name, (key, _) in list(self.failed.items()):
            if posted.get(name) != key:
                del self.failed[name]
                changed = True
        for name, key in posted.items():
            if name not in self.loaded and (retry or self.failed.get(name, ("",))[0] != key):
                self._load(engine, name, key)
                changed = True
        return changed

    def errors(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((name, why) for name, (_, why) in self.failed.items()))

    def _load(self, engine: GenerationEngine, name: str, key: str) -> None:
        try:
            adapters = decode_adapters(self.path_of(key).read_bytes())
            if list(adapters) != [name]:
                raise LoraRefused(f"LoRA adapter: artifact {key} holds {sorted(adapters)[:4]}, not {name!r}")
            check_factors(adapters[name])
            engine.add_adapter(name, adapters[name])
        except Exception as e:  # whatever the artifact holds, the worker serves on; the reason goes in its report
            why = str(e) if isinstance(e, LoraRefused | ValueError) else f"{type(e).__name__}: {e}"
            log.warning("LoRA adapter %r (artifact %s) not loaded: %s", name, key, why)
            self.failed[name] = (key, why[:MAX_REASON_CHARS])
            return
        self.failed.pop(name, None)
        self.loaded[name] = key
